"""Anthropic Messages request -> canonical chat request: every field, and the Anthropic
adapter's use of the cache_control marks the canonical JSON body never carries."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import BadRequest
from gateway.inbound.messages_request import effort_for_budget
from gateway.inbound.messages_request import translate_request
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.anthropic.request import build_messages_request
from gateway.providers.base import UpstreamCall
from gateway.providers.registry import provider_config
from gateway.wire.anthropic import CacheControlledTool
from gateway.wire.anthropic import InboundRequest
from gateway.wire.openai_chat import UNSET

CACHE = {"type": "ephemeral"}
HI: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]


def translate(count_only: bool = False, **fields: Any) -> tuple[Any, dict[str, Any]]:
    body = {"model": "m", "max_tokens": 100, "messages": HI, **fields}
    body = {k: v for k, v in body.items() if v is not ...}
    request, canonical = translate_request(
        msgspec.convert(body, InboundRequest), count_only=count_only
    )
    return request, canonical


def rejected(param: str, **fields: Any) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        translate(**fields)
    assert info.value.param == param
    return info.value


def test_minimal_request() -> None:
    request, body = translate()
    assert body == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "max_completion_tokens": 100,
    }
    assert request.max_completion_tokens == 100
    assert request.messages[0].content == "hi"


def test_sampling_fields_and_stream() -> None:
    _, body = translate(
        stop_sequences=["END", ""], temperature=0.2, top_p=0.9, top_k=5, stream=True
    )
    assert body["stop"] == ["END", ""]
    assert (body["temperature"], body["top_p"], body["stream"]) == (0.2, 0.9, True)
    assert "top_k" not in body  # no chat field: ignored, as documented


def test_null_stays_null() -> None:
    _, body = translate(temperature=None, stop_sequences=None)
    assert body["temperature"] is None
    assert body["stop"] is None


def test_max_tokens_required_and_positive() -> None:
    err = rejected("max_tokens", max_tokens=...)
    assert "required" in err.message
    rejected("max_tokens", max_tokens=0)
    request, body = translate(count_only=True, max_tokens=...)
    assert "max_completion_tokens" not in body
    assert request.max_completion_tokens is UNSET


def test_system_string_and_blocks_with_cache_control() -> None:
    _, body = translate(system="be brief")
    assert body["messages"][0] == {"role": "system", "content": "be brief"}
    blocks = [{"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": CACHE}]
    request, body = translate(system=blocks)
    assert body["messages"][0] == {
        "role": "system",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
    }
    assert request.messages[0].content[1]["cache_control"] == CACHE
    rejected("system[0].type", system=[{"type": "image"}])


def test_user_text_and_images() -> None:
    content = [
        {"type": "text", "text": ""},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}},
        {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}},
    ]
    _, body = translate(messages=[{"role": "user", "content": content}])
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": ""},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        }
    ]
    bad = [{"role": "user", "content": [{"type": "image", "source": {"type": "file"}}]}]
    rejected("messages[0].content[0].source.type", messages=bad)


def test_unknown_and_misplaced_blocks_name_their_path() -> None:
    turn = {"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "video"}]}
    rejected("messages[1].content[1].type", messages=[*HI, turn])
    rejected(
        "messages[0].content[0].type",
        messages=[{"role": "user", "content": [{"type": "document"}]}],
    )
    assistant = {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t"}]}
    rejected("messages[1].content[0].type", messages=[*HI, assistant])
    rejected("messages[0].role", messages=[{"role": "system", "content": "x"}])
    rejected(
        "messages[0].content[0].text", messages=[{"role": "user", "content": [{"type": "text"}]}]
    )


def test_assistant_tool_use_and_thinking() -> None:
    assistant = {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "sig"},
            {"type": "text", "text": "Checking."},
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "get_weather",
                "input": {"city": "Paris", "n": [1]},
            },
            {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}},
        ],
    }
    only_thinking = {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "x"}]}
    _, body = translate(messages=[*HI, assistant, only_thinking, *HI])
    assert body["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Checking."}],
        "tool_calls": [
            {
                "id": "toolu_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris","n":[1]}'},
            },
            {"id": "toolu_2", "type": "function", "function": {"name": "now", "arguments": "{}"}},
        ],
    }
    assert len(body["messages"]) == 3  # the thinking-only turn reaches no upstream
    calls_only = {"role": "assistant", "content": [assistant["content"][3]]}
    _, body = translate(messages=[*HI, calls_only])
    assert "content" not in body["messages"][1]
    bad = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t", "name": "n", "input": []}],
    }
    rejected("messages[1].content[0].input", messages=[*HI, bad])


def test_tool_results_become_tool_messages_then_the_rest() -> None:
    turn = {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "18C"},
            {
                "type": "tool_result",
                "tool_use_id": "toolu_2",
                "is_error": True,
                "content": [
                    {"type": "text", "text": "no clock"},
                    {"type": "image", "source": {"type": "url", "url": "https://x/c.png"}},
                ],
            },
            {"type": "tool_result", "tool_use_id": "toolu_3"},
            {"type": "text", "text": "and now?"},
        ],
    }
    _, body = translate(messages=[turn])
    assert body["messages"] == [
        {"role": "tool", "tool_call_id": "toolu_1", "content": "18C"},
        {
            "role": "tool",
            "tool_call_id": "toolu_2",
            "content": [{"type": "text", "text": "no clock"}],
        },
        {"role": "tool", "tool_call_id": "toolu_3", "content": ""},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "https://x/c.png"}},
                {"type": "text", "text": "and now?"},
            ],
        },
    ]
    results_only = {"role": "user", "content": turn["content"][:1]}
    _, body = translate(messages=[results_only])
    assert [m["role"] for m in body["messages"]] == ["tool"]
    no_id = {"role": "user", "content": [{"type": "tool_result", "content": "x"}]}
    rejected("messages[0].content[0].tool_use_id", messages=[no_id])


def test_tools_and_tool_choice() -> None:
    tools = [
        {"name": "get_weather", "description": "w", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "now", "input_schema": {}, "cache_control": CACHE},
    ]
    request, body = translate(tools=tools, tool_choice={"type": "any"})
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "w",
                "parameters": {"type": "object"},
            },
        },
        {"type": "function", "function": {"name": "now", "parameters": {}}},
    ]
    assert body["tool_choice"] == "required"
    assert isinstance(request.tools[1], CacheControlledTool)
    assert request.tools[1].cache_control == CACHE
    assert not isinstance(request.tools[0], CacheControlledTool)
    for given, expected in [
        ({"type": "auto"}, "auto"),
        ({"type": "none"}, "none"),
        ({"type": "tool", "name": "now"}, {"type": "function", "function": {"name": "now"}}),
    ]:
        _, body = translate(tools=tools, tool_choice=given)
        assert body["tool_choice"] == expected
        assert "parallel_tool_calls" not in body
    _, body = translate(
        tools=tools, tool_choice={"type": "auto", "disable_parallel_tool_use": True}
    )
    assert body["parallel_tool_calls"] is False
    rejected("tool_choice.type", tool_choice={"type": "some"})
    rejected("tool_choice.name", tool_choice={"type": "tool"})
    rejected("tools[0].type", tools=[{"type": "web_search_20250305", "name": "web_search"}])
    rejected("tools[0].input_schema", tools=[{"name": "x"}])


def test_thinking_budget_to_reasoning_effort() -> None:
    assert [effort_for_budget(b) for b in (1024, 3999, 4000, 15999, 16000, 64000)] == [
        "low",
        "low",
        "medium",
        "medium",
        "high",
        "high",
    ]
    _, body = translate(max_tokens=20000, thinking={"type": "enabled", "budget_tokens": 10000})
    assert body["reasoning_effort"] == "medium"
    _, body = translate(thinking={"type": "disabled"})
    assert "reasoning_effort" not in body
    rejected("thinking.budget_tokens", thinking={"type": "enabled", "budget_tokens": 512})
    rejected("thinking.budget_tokens", thinking={"type": "enabled", "budget_tokens": 2000})
    rejected("thinking.type", thinking={"type": "adaptive"})


def test_metadata_user_id_and_unserved_fields() -> None:
    _, body = translate(metadata={"user_id": "u-1"})
    assert body["user"] == "u-1"
    _, body = translate(metadata={})
    assert "user" not in body
    rejected("mcp_servers", mcp_servers=[{"type": "url", "url": "https://x", "name": "x"}])
    rejected("container", container="c-1")


def test_cache_control_reaches_the_anthropic_upstream_only() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "doc", "cache_control": CACHE}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "now", "input": {}}],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "t1",
                    "content": "12:00",
                    "cache_control": CACHE,
                }
            ],
        },
    ]
    tools = [{"name": "now", "input_schema": {"type": "object"}, "cache_control": CACHE}]
    system = [{"type": "text", "text": "sys", "cache_control": CACHE}]
    request, body = translate(messages=messages, tools=tools, system=system)
    assert "cache_control" not in json.dumps(body)
    call = UpstreamCall(
        request=request,
        body=body,
        provider=provider_config(name="claude", kind="anthropic"),
        key=None,
        model="claude-x",
        stream=True,
        request_id="r",
    )
    sent = msgspec.to_builtins(build_messages_request(call))
    assert sent["system"] == [{"type": "text", "text": "sys", "cache_control": CACHE}]
    assert sent["tools"][0]["cache_control"] == CACHE
    assert sent["messages"][0]["content"] == [
        {"type": "text", "text": "doc", "cache_control": CACHE}
    ]
    assert sent["messages"][2]["content"] == [
        {
            "type": "tool_result",
            "tool_use_id": "t1",
            "content": [{"type": "text", "text": "12:00", "cache_control": CACHE}],
        }
    ]


def test_count_tokens_request_keeps_what_count_tokens_takes() -> None:
    request, body = translate(
        count_only=True,
        max_tokens=...,
        system="sys",
        temperature=0.5,
        metadata={"user_id": "u"},
        tools=[{"name": "now", "input_schema": {"type": "object"}}],
    )
    provider = provider_config(
        name="claude",
        kind="anthropic",
        base_url="http://127.0.0.1:9/",
        keys=[ProviderKey(key=Secret("sk-ant"))],
    )
    call = UpstreamCall(
        request=request,
        body=body,
        provider=provider,
        key=provider.keys[0],
        model="claude-x",
        stream=False,
        request_id="r",
    )
    upstream = AnthropicAdapter(provider).count_tokens(call).request
    assert upstream.url == "http://127.0.0.1:9/v1/messages/count_tokens"
    assert upstream.headers["x-api-key"] == "sk-ant"
    assert upstream.headers["anthropic-version"]
    sent = json.loads(upstream.body)
    assert set(sent) == {"model", "messages", "system", "tools"}
    assert sent["model"] == "claude-x"
