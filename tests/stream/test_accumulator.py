"""The accumulator routes by identity, numbers tool calls itself, and keeps one finish."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.errors import UpstreamProtocolError
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import chunk_decoder
from tests.fixtures import FIXTURES

ARGS = {
    "search_documents": {"query": "q3 report", "limit": 5},
    "get_user": {"user_id": "u-42"},
    "get_weather": {"city": "Paris"},
}
NAMES = list(ARGS)


def chunk(
    *deltas: ToolCallDelta,
    content: str | None = None,
    finish: str | None = None,
    index: int = 0,
    usage: Usage | None = None,
) -> ChatChunk:
    delta = Delta()
    if deltas:
        delta.tool_calls = list(deltas)
    if content is not None:
        delta.content = content
    out = ChatChunk(
        id="c1",
        model="m",
        created=1,
        choices=[ChunkChoice(index=index, delta=delta, finish_reason=finish)],
    )
    if usage is not None:
        out.usage = usage
    return out


def start(i: int, name: str, *, index: int | None = None) -> ToolCallDelta:
    return ToolCallDelta(
        index=i if index is None else index,
        id=f"call_{name}",
        type="function",
        function=FunctionDelta(name=name, arguments=""),
    )


def args(i: int, text: str) -> ToolCallDelta:
    return ToolCallDelta(index=i, function=FunctionDelta(arguments=text))


def pieces(name: str, size: int = 4) -> list[str]:
    text = json.dumps(ARGS[name])
    return [text[i : i + size] for i in range(0, len(text), size)]


def calls_of(acc: StreamAccumulator) -> list[tuple[str, Any]]:
    message = acc.message()
    assert message.tool_calls is not UNSET
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]


def interleave(order: list[int], count: int) -> tuple[StreamAccumulator, list[ChatChunk | None]]:
    """Feed `count` calls whose argument pieces arrive in the repeating `order`."""
    acc = StreamAccumulator()
    out = [acc.add(chunk(start(i, NAMES[i]))) for i in range(count)]
    parts = [pieces(NAMES[i]) for i in range(count)]
    for step in range(max(len(p) for p in parts)):
        out += [acc.add(chunk(args(i, parts[i][step]))) for i in order if step < len(parts[i])]
    out.append(acc.add(chunk(finish="tool_calls")))
    return acc, out


@pytest.mark.parametrize(
    ("order", "count"), [([0, 1], 2), ([1, 0], 2), ([0, 1, 2], 3), ([2, 0, 1], 3)]
)
def test_interleaved_calls_keep_their_arguments(order: list[int], count: int) -> None:
    acc, out = interleave(order, count)
    assert calls_of(acc) == [(n, ARGS[n]) for n in NAMES[:count]]
    assert all(o is not None for o in out)


def test_order_0110_across_chunks() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(start(0, "search_documents")))
    acc.add(chunk(start(1, "get_user")))
    a, b = pieces("search_documents", 8), pieces("get_user", 8)
    sequence = []
    for step in range(max(len(a), len(b))):
        pair = [(0, a), (1, b)] if step % 2 == 0 else [(1, b), (0, a)]
        sequence += [(i, p[step]) for i, p in pair if step < len(p)]
    for i, text in sequence:
        acc.add(chunk(args(i, text)))
    assert calls_of(acc) == [(n, ARGS[n]) for n in NAMES[:2]]


def test_two_calls_in_one_chunk() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(start(0, "get_user"), start(1, "get_weather")))
    acc.add(chunk(args(1, json.dumps(ARGS["get_weather"])), args(0, json.dumps(ARGS["get_user"]))))
    assert calls_of(acc) == [("get_user", ARGS["get_user"]), ("get_weather", ARGS["get_weather"])]


def test_correct_chunks_pass_through_unchanged() -> None:
    acc = StreamAccumulator()
    for c in [chunk(start(0, "get_user")), chunk(args(0, "{}")), chunk(content="hi")]:
        assert acc.add(c) is c


def test_reused_upstream_index_is_renumbered_by_id() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(start(0, "get_user")))
    second = acc.add(chunk(start(0, "get_weather", index=0)))
    assert second is not None
    assert second.choices[0].delta.tool_calls[0].index == 1  # type: ignore[index]
    by_id = ToolCallDelta(
        index=0,
        id="call_get_weather",
        function=FunctionDelta(arguments=json.dumps(ARGS["get_weather"])),
    )
    fixed = acc.add(chunk(by_id))
    assert fixed is not None
    delta = fixed.choices[0].delta.tool_calls[0]  # type: ignore[index]
    assert (delta.index, delta.id) == (1, UNSET)
    acc.add(chunk(args(0, json.dumps(ARGS["get_user"]))))
    assert calls_of(acc) == [("get_user", ARGS["get_user"]), ("get_weather", ARGS["get_weather"])]


def test_repeated_id_and_name_are_sent_once() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(start(0, "get_user")))
    again = ToolCallDelta(
        index=0,
        id="call_get_user",
        type="function",
        function=FunctionDelta(name="get_user", arguments="{}"),
    )
    out = acc.add(chunk(again))
    assert out is not None
    sent = out.choices[0].delta.tool_calls[0]  # type: ignore[index]
    assert (sent.id, sent.type, sent.function.name) == (UNSET, UNSET, UNSET)  # type: ignore[union-attr]
    assert calls_of(acc) == [("get_user", {})]


def test_missing_id_is_minted_and_missing_identity_is_an_error() -> None:
    acc = StreamAccumulator(id_seed="req1")
    out = acc.add(chunk(ToolCallDelta(index=0, function=FunctionDelta(name="f", arguments=""))))
    assert out is not None
    assert out.choices[0].delta.tool_calls[0].id == "call_req1_0"  # type: ignore[index]
    acc.add(chunk(ToolCallDelta(function=FunctionDelta(arguments="{}"))))  # only one call: fine
    acc.add(chunk(ToolCallDelta(index=1, id="x", function=FunctionDelta(name="g", arguments=""))))
    with pytest.raises(UpstreamProtocolError):
        acc.add(chunk(ToolCallDelta(function=FunctionDelta(arguments="{}"))))


def test_one_finish_per_choice_and_tool_calls_reason() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(start(0, "get_user")))
    first = acc.add(chunk(finish="stop"))
    assert first is not None
    assert first.choices[0].finish_reason == "tool_calls"
    assert acc.add(chunk(finish="stop")) is None
    assert acc.unfinished_choices() == []


def test_second_choice_is_folded_into_the_first() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(start(0, "get_user")))
    out = acc.add(chunk(start(0, "get_weather"), index=1))
    assert out is not None
    assert out.choices[0].index == 0
    assert out.choices[0].delta.tool_calls[0].index == 1  # type: ignore[index]
    assert [n for n, _ in calls_of_raw(acc)] == ["get_user", "get_weather"]


def calls_of_raw(acc: StreamAccumulator) -> list[tuple[str, str]]:
    message = acc.message()
    assert message.tool_calls is not UNSET
    return [(c.function.name, c.function.arguments) for c in message.tool_calls]


def test_usage_is_recorded_and_held_back() -> None:
    acc = StreamAccumulator()
    usage = Usage(prompt_tokens=3, completion_tokens=2, total_tokens=5)
    with_usage = acc.add(chunk(content="hi", usage=usage))
    assert with_usage is not None
    assert with_usage.usage is UNSET
    only_usage = ChatChunk(id="c1", choices=[], usage=usage)
    assert acc.add(only_usage) is None
    assert acc.usage_chunk is only_usage
    assert acc.usage == usage


def test_completion_and_empty_content() -> None:
    acc = StreamAccumulator()
    acc.add(chunk(content=""))
    acc.add(chunk(finish="stop"))
    completion = acc.completion(id="x", model="m", created=1)
    assert completion.choices[0].message.content == ""
    assert completion.choices[0].finish_reason == "stop"
    assert not acc.output_seen


# --- recorded streams, split anywhere ------------------------------------------------------


def sse_events(data: bytes, cuts: list[int]) -> list[SSEEvent]:
    """`data` fed to a fresh decoder in pieces cut at `cuts`."""
    decoder = SSEDecoder()
    events = []
    last = 0
    for cut in [*sorted(cuts), len(data)]:
        events += decoder.feed(data[last:cut])
        last = cut
    events += decoder.close()
    return events


def decode_chat_stream(data: bytes, cuts: list[int]) -> list[ChatChunk]:
    events = sse_events(data, cuts)
    return [chunk_decoder.decode(e.data) for e in events if e.data != b"[DONE]"]


def resplit(chunks: list[ChatChunk], cuts: list[int]) -> list[ChatChunk]:
    """Every argument and content fragment cut again at `cuts` (positions mod length)."""
    out: list[ChatChunk] = []
    for c in chunks:
        if not c.choices:
            out.append(c)
            continue
        delta = c.choices[0].delta
        text = None
        if delta.tool_calls and delta.tool_calls[0].function is not UNSET:
            fn = delta.tool_calls[0].function
            if fn.name is UNSET and isinstance(fn.arguments, str) and len(fn.arguments) > 1:
                text = fn.arguments
        if text is None:
            out.append(c)
            continue
        points = sorted({p % len(text) for p in cuts} - {0})
        parts = [text[a:b] for a, b in zip([0, *points], [*points, len(text)], strict=True)]
        for part in parts:
            tc = msgspec.structs.replace(
                delta.tool_calls[0],  # type: ignore[index]
                function=FunctionDelta(arguments=part),
            )
            out.append(chunk(tc))
    return out


def final_state(chunks: list[ChatChunk]) -> tuple[Any, ...]:
    acc = StreamAccumulator()
    for c in chunks:
        acc.add(c)
    message = acc.message()
    return (msgspec.json.encode(message), acc.usage, acc.choices[0].finish_reason)


CHAT_FIXTURES = ["openai_chat_parallel_tools.sse", "openai_chat_parallel_tools_sdk_fixture.sse"]


@pytest.mark.parametrize("name", CHAT_FIXTURES)
def test_fixture_tool_calls(name: str) -> None:
    chunks = decode_chat_stream((FIXTURES / name).read_bytes(), [])
    acc = StreamAccumulator()
    for c in chunks:
        acc.add(c)
    calls = calls_of_raw(acc)
    assert len(calls) == 2
    assert len({name for name, _ in calls}) >= 1
    for _, arguments in calls:
        json.loads(arguments)
    assert acc.usage is not None
    assert acc.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("name", CHAT_FIXTURES)
@settings(max_examples=60, deadline=None)
@given(
    byte_cuts=st.lists(st.integers(min_value=0), max_size=12),
    delta_cuts=st.lists(st.integers(min_value=1, max_value=50), max_size=4),
)
def test_split_anywhere_same_answer(name: str, byte_cuts: list[int], delta_cuts: list[int]) -> None:
    data = (FIXTURES / name).read_bytes()
    whole = final_state(decode_chat_stream(data, []))
    cut_bytes = [c % (len(data) + 1) for c in byte_cuts]
    assert final_state(resplit(decode_chat_stream(data, cut_bytes), delta_cuts)) == whole


# --- Responses API: routed by item_id ------------------------------------------------------

RESPONSES_FIXTURES = [
    "openai_responses_function_calls.sse",
    "openai_responses_reasoning_then_function_call.sse",
]


def feed_responses(acc: StreamAccumulator, data: bytes, cuts: list[int]) -> dict[str, str]:
    events = sse_events(data, cuts)
    done: dict[str, str] = {}
    for e in events:
        ev = json.loads(e.data)
        kind = ev["type"]
        if kind == "response.output_item.added" and ev["item"]["type"] == "function_call":
            item = ev["item"]
            acc.responses_call_added(item["id"], item["call_id"], item["name"], item["arguments"])
        elif kind == "response.function_call_arguments.delta":
            acc.responses_arguments_delta(ev["item_id"], ev["delta"])
        elif kind == "response.function_call_arguments.done":
            done[ev["item_id"]] = ev["arguments"]
        elif kind == "response.output_text.delta":
            acc.responses_text_delta(ev["delta"])
        elif kind == "response.completed":
            u = ev["response"]["usage"]
            acc.responses_finish(
                "stop",
                Usage(
                    prompt_tokens=u["input_tokens"],
                    completion_tokens=u["output_tokens"],
                    total_tokens=u["total_tokens"],
                ),
            )
    return done


@pytest.mark.parametrize("name", RESPONSES_FIXTURES)
@settings(max_examples=40, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0), max_size=10))
def test_responses_calls_routed_by_item_id(name: str, cuts: list[int]) -> None:
    data = (FIXTURES / name).read_bytes()
    acc = StreamAccumulator()
    done = feed_responses(acc, data, [c % (len(data) + 1) for c in cuts])
    state = acc.choices[0]
    assert [c.index for c in state.calls] == list(range(len(state.calls)))
    assert {c.item_id: "".join(c.arguments) for c in state.calls} == done
    assert all(c.id and c.id.startswith("call_") for c in state.calls)
    assert state.finish_reason == "tool_calls"
    assert acc.usage is not None
    assert acc.usage.total_tokens > 0


@settings(max_examples=60, deadline=None)
@given(
    texts=st.lists(st.text(max_size=6), max_size=400),
    calls=st.lists(st.text(min_size=1, max_size=5), max_size=300),
)
def test_long_answers_keep_every_character_in_few_objects(
    texts: list[str], calls: list[str]
) -> None:
    # a long answer's fragments are joined as they come (a stream is held open for minutes):
    # the answer is the same, and what the accumulator holds grows by one object per 64
    acc = StreamAccumulator()
    acc.add(chunk(start(0, "get_user")))
    for text in texts:
        acc.add(chunk(content=text))
    for piece in calls:
        acc.add(chunk(args(0, piece)))
    acc.add(chunk(finish="tool_calls"))
    state = acc.choices[0]
    fed = [t for t in texts if t]
    assert "".join(state.content) == "".join(fed)
    assert len(state.content) <= len(fed) // 64 + 63
    assert "".join(state.calls[0].arguments) == "".join(calls)
    assert len(state.calls[0].arguments) <= (len(calls) + 1) // 64 + 63
    message = acc.message()
    assert (message.content or "") == "".join(fed)
    assert message.tool_calls is not UNSET
    assert message.tool_calls[0].function.arguments == "".join(calls)


def test_a_thousand_deltas_are_held_in_fifteen_joined_strings_and_the_rest() -> None:
    acc = StreamAccumulator()
    for i in range(1000):
        acc.add(chunk(content=f"w{i} "))
    assert len(acc.choices[0].content) == 1000 // 64 + 1000 % 64
    assert acc.message().content == "".join(f"w{i} " for i in range(1000))
