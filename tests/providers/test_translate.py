"""The shared translator parts (`gateway/providers/translate.py`): the sampling copy of the
request builders and the content-block tool calls of Anthropic and Bedrock."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.providers.translate import MESSAGES_SAMPLING
from gateway.providers.translate import ToolBlocks
from gateway.providers.translate import copy_sampling
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatRequest


class Target(msgspec.Struct):
    temperature: Any = UNSET
    top_p: Any = UNSET
    seed: Any = UNSET
    stop_sequences: Any = UNSET


def copied(names: dict[str, str], **fields: Any) -> Target:
    request = msgspec.convert({"model": "m", "messages": [], **fields}, ChatRequest)
    target = Target()
    copy_sampling(request, target, names)
    return target


@pytest.mark.parametrize(("stop", "expected"), [("END", ["END"]), (["a", "b"], ["a", "b"])])
def test_stop_is_always_a_list(stop: Any, expected: list[str]) -> None:
    assert copied(dict(MESSAGES_SAMPLING), stop=stop).stop_sequences == expected


@pytest.mark.parametrize("fields", [{}, {"stop": None}, {"stop": []}, {"temperature": None}])
def test_absent_null_and_empty_are_not_copied(fields: dict[str, Any]) -> None:
    assert copied(dict(MESSAGES_SAMPLING), **fields) == Target()


def test_only_the_parameters_the_provider_takes_are_copied() -> None:
    target = copied(dict(MESSAGES_SAMPLING), temperature=0, top_p=0.5, seed=7)
    assert (target.temperature, target.top_p, target.seed) == (0, 0.5, UNSET)  # 0 is kept
    assert copied({"seed": "seed"}, seed=7, temperature=1.0) == Target(seed=7)


def test_tool_blocks_route_by_block_and_end_a_call_without_input_with_an_empty_object() -> None:
    blocks = ToolBlocks()
    assert not blocks.made_calls
    start = blocks.start(1, "toolu_1", "get_weather")
    assert start.tool_calls[0].index == 1  # type: ignore[index]  # the upstream's block index
    blocks.start(3, "toolu_2", "now")
    assert blocks.made_calls
    assert {1, 3} == {b for b in range(5) if b in blocks}
    assert blocks.arguments(0, "text of a block that is not a call") is None
    delta = blocks.arguments(1, '{"city":')
    assert delta is not None
    assert delta.tool_calls[0].function.arguments == '{"city":'  # type: ignore[index,union-attr]
    assert blocks.stop(1) is None  # it had input
    empty = blocks.stop(3)
    assert empty is not None
    assert empty.tool_calls[0].function.arguments == "{}"  # type: ignore[index,union-attr]
    assert blocks.stop(3) is None  # once


def test_an_answer_tool_block_is_content() -> None:
    blocks = ToolBlocks()
    blocks.start_answer(0)
    assert not blocks.made_calls
    assert blocks.arguments(0, '{"a"') is not None
    assert blocks.arguments(0, '{"a"').content == '{"a"'  # type: ignore[union-attr]
    fresh = ToolBlocks()
    fresh.start_answer(2)
    assert fresh.stop(2).content == "{}"  # type: ignore[union-attr]
