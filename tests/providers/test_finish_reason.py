"""DESIGN §4: `finish_reason` is `tool_calls` whenever the turn made tool calls, whatever the
upstream's own word, for a non-streamed answer as for a streamed one, on every provider
kind; and never `tool_calls` for a turn that made none."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.config import ProviderConfig
from gateway.config_base import ProviderKey
from gateway.config_base import Secret
from gateway.providers.base import UpstreamCall
from gateway.providers.registry import make_adapter
from gateway.providers.registry import provider_config
from gateway.providers.translate import chat_finish
from gateway.providers.translate import mapped_finish
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import ToolCallDelta

BODY: dict[str, Any] = {
    "model": "m",
    "messages": [{"role": "user", "content": "weather in Paris?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}],
}
KEY = ProviderKey(key=Secret("k"))
PROVIDERS: dict[str, ProviderConfig] = {
    "openai": provider_config(name="o", kind="openai", keys=[KEY]),
    "azure": provider_config(
        name="az", kind="azure", base_url="https://r.openai.azure.com", api_version="v1"
    ),
    "anthropic": provider_config(name="a", kind="anthropic", keys=[KEY]),
    "gemini": provider_config(name="g", kind="gemini", keys=[KEY]),
    "vertex": provider_config(name="v", kind="vertex", region="us-central1", project="p"),
    "bedrock": provider_config(name="b", kind="bedrock", region="us-east-1", keys=[KEY]),
    "ollama": provider_config(name="ol", kind="ollama"),
}

# Each kind's non-streamed answer: one tool call, and the upstream's word for "it ended
# normally", the word an OpenAI-compatible server sends even after calling tools.
CALLED_BUT_SAID_STOP: dict[str, dict[str, Any]] = {
    "openai": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                        }
                    ],
                },
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
        "x_vendor": {"kept": True},
    },
    "anthropic": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
        ],
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 3, "output_tokens": 2},
    },
    "gemini": {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
                },
                "finishReason": "STOP",
            }
        ],
    },
    "bedrock": {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {
                        "toolUse": {
                            "toolUseId": "t1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        }
                    }
                ],
            }
        },
        "stopReason": "end_turn",
        "usage": {"inputTokens": 3, "outputTokens": 2, "totalTokens": 5},
    },
    "ollama": {
        "model": "m",
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 3,
        "eval_count": 2,
    },
}
ANSWER_OF = {"azure": "openai", "vertex": "gemini"}


def make_call(kind: str) -> UpstreamCall:
    return UpstreamCall(
        request=msgspec.convert(BODY, ChatRequest),
        body=BODY,
        provider=PROVIDERS[kind],
        key=KEY,
        model="m",
        stream=False,
        request_id="req1",
        created=1,
        now=1700000000.0,
    )


def unary(kind: str, answer: dict[str, Any]) -> dict[str, Any]:
    result = make_adapter(PROVIDERS[kind]).unary_result(
        make_call(kind), json.dumps(answer).encode()
    )
    decoded: dict[str, Any] = json.loads(result.body)
    return decoded


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_a_non_streamed_answer_with_calls_finishes_tool_calls(kind: str) -> None:
    completion = unary(kind, CALLED_BUT_SAID_STOP[ANSWER_OF.get(kind, kind)])
    (choice,) = completion["choices"]
    assert choice["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
    assert choice["finish_reason"] == "tool_calls"


@pytest.mark.parametrize("kind", ["openai", "azure"])
def test_the_openai_answer_is_otherwise_forwarded_as_it_came(kind: str) -> None:
    completion = unary(kind, CALLED_BUT_SAID_STOP["openai"])
    expected = json.loads(json.dumps(CALLED_BUT_SAID_STOP["openai"]))
    expected["choices"][0]["finish_reason"] = "tool_calls"
    assert completion == expected  # the vendor field and the order of the rest kept
    assert list(completion) == list(expected)


@pytest.mark.parametrize("kind", ["openai", "azure"])
def test_an_openai_answer_that_already_obeys_is_the_upstream_bytes(kind: str) -> None:
    answer = json.loads(json.dumps(CALLED_BUT_SAID_STOP["openai"]))
    answer["choices"][0]["finish_reason"] = "tool_calls"
    body = json.dumps(answer, indent=1).encode()  # bytes no re-encoding would give
    result = make_adapter(PROVIDERS[kind]).unary_result(make_call(kind), body)
    assert result.body is body


@pytest.mark.parametrize("calls", [None, []])
def test_an_openai_answer_without_calls_keeps_its_word(calls: list[Any] | None) -> None:
    answer = json.loads(json.dumps(CALLED_BUT_SAID_STOP["openai"]))
    answer["choices"][0]["message"] = {"role": "assistant", "content": "hi", "tool_calls": calls}
    answer["choices"][0]["finish_reason"] = "length"
    body = json.dumps(answer).encode()
    assert make_adapter(PROVIDERS["openai"]).unary_result(make_call("openai"), body).body is body


def test_the_accumulated_path_mock_and_streams_say_tool_calls() -> None:
    """The mock (and every stream) is answered from the accumulator: a call, then `stop`."""
    acc = StreamAccumulator(id_seed="req1")
    start = ToolCallDelta(index=0, id="call_1", type="function")
    for delta, finish in [(Delta(tool_calls=[start]), None), (Delta(), "stop")]:
        acc.add(
            ChatChunk(
                id="c",
                created=1,
                model="m",
                choices=[ChunkChoice(delta=delta, finish_reason=finish)],
            )
        )
    completion = acc.completion(id="c", model="m", created=1)
    assert completion.choices[0].finish_reason == "tool_calls"
    assert make_adapter(provider_config(name="mk", kind="mock")).native_unary is False


def test_the_shared_rule() -> None:
    assert chat_finish("stop", True) == "tool_calls"
    assert chat_finish("length", True) == "tool_calls"
    assert chat_finish("tool_calls", False) == "stop"  # a forced answer tool, server tools
    assert chat_finish("content_filter", False) == "content_filter"
    table = {"end_turn": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
    assert mapped_finish(table, "max_tokens", False) == "length"
    assert mapped_finish(table, "never-heard-of", False) == "stop"
    assert mapped_finish(table, None, True) == "tool_calls"
