"""Canonical chat request -> Anthropic Messages request: every rule of
gateway/providers/anthropic/request.py and docs/providers.md."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import BadRequest
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.base import UpstreamCall
from gateway.providers.registry import provider_config
from gateway.wire.openai_chat import ChatRequest

USER = {"role": "user", "content": "hi"}


def translate(stream: bool = False, **fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "claude", "messages": [USER], **fields}
    call = UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=provider_config(name="c", kind="anthropic"),
        key=ProviderKey(key=Secret("k")),
        model="claude-up",
        stream=stream,
        request_id="r",
    )
    request = AnthropicAdapter(call.provider).build_request(call)
    result: dict[str, Any] = json.loads(request.body)
    return result


def rejected(**fields: Any) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        translate(**fields)
    return info.value


def text(t: str) -> dict[str, str]:
    return {"type": "text", "text": t}


def test_minimal_request() -> None:
    assert translate() == {
        "model": "claude-up",
        "max_tokens": 4096,
        "messages": [{"role": "user", "content": [text("hi")]}],
    }


def test_system_and_developer_go_to_system() -> None:
    body = translate(
        messages=[
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": [text("use tools"), text("")]},
            {"role": "system", "content": ""},
            USER,
        ]
    )
    assert body["system"] == [text("be brief"), text("use tools")]
    assert body["messages"] == [{"role": "user", "content": [text("hi")]}]


def test_user_parts_and_images() -> None:
    body = translate(
        messages=[
            {
                "role": "user",
                "content": [
                    text("look"),
                    {"type": "image_url", "image_url": {"url": "https://x.test/a.png"}},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                ],
            }
        ]
    )
    assert body["messages"][0]["content"] == [
        text("look"),
        {"type": "image", "source": {"type": "url", "url": "https://x.test/a.png"}},
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBO"}},
    ]


@pytest.mark.parametrize("url", ["ftp://x/a.png", "data:image/png,notbase64"])
def test_bad_image_urls_are_rejected(url: str) -> None:
    err = rejected(
        messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    )
    assert err.param == "messages[0].content[0].image_url"


def test_unsupported_part_is_rejected() -> None:
    part = {"type": "input_audio", "input_audio": {"data": "x", "format": "wav"}}
    assert rejected(messages=[{"role": "user", "content": [part]}]).param == (
        "messages[0].content[0].type"
    )


HISTORY = [
    USER,
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "t1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}},
            {"id": "t2", "type": "function", "function": {"name": "g", "arguments": ""}},
        ],
    },
    {"role": "tool", "tool_call_id": "t1", "content": "one"},
    {"role": "tool", "tool_call_id": "t2", "content": ""},
    {"role": "user", "content": "and now?"},
]


def test_tool_history_merged_into_alternating_turns() -> None:
    body = translate(messages=HISTORY)
    assert body["messages"] == [
        {"role": "user", "content": [text("hi")]},
        {
            "role": "assistant",
            "content": [  # the "" content is dropped, not sent as an empty text block
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 1}},
                {"type": "tool_use", "id": "t2", "name": "g", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
                {"type": "tool_result", "tool_use_id": "t2"},  # "" result: no content key
                text("and now?"),
            ],
        },
    ]
    assert b"null" not in json.dumps(body).encode()


def test_empty_assistant_turn_is_dropped_and_neighbours_merge() -> None:
    body = translate(
        messages=[USER, {"role": "assistant", "content": ""}, {"role": "user", "content": "again"}]
    )
    assert body["messages"] == [{"role": "user", "content": [text("hi"), text("again")]}]


def test_assistant_text_with_tool_calls_and_parts_tool_result() -> None:
    body = translate(
        messages=[
            USER,
            {
                "role": "assistant",
                "content": [text("calling"), text("")],
                "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": [text("r1"), text("")]},
            {"role": "assistant", "content": "done"},
        ]
    )
    assert body["messages"][1]["content"][0] == text("calling")
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": [text("r1")]}
    ]
    assert body["messages"][3] == {"role": "assistant", "content": [text("done")]}


@pytest.mark.parametrize("arguments", ["not json", "[1]"])
def test_bad_tool_arguments_are_rejected(arguments: str) -> None:
    call = {"id": "t", "type": "function", "function": {"name": "f", "arguments": arguments}}
    err = rejected(messages=[USER, {"role": "assistant", "tool_calls": [call]}])
    assert err.param == "messages[1].tool_calls[0].function.arguments"


def test_function_role_is_rejected() -> None:
    assert rejected(messages=[{"role": "function", "content": "x", "name": "f"}]).param == (
        "messages[0].role"
    )


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            "strict": True,
        },
    },
    {"type": "function", "function": {"name": "now"}},
]


def test_tools() -> None:
    body = translate(tools=TOOLS)
    assert body["tools"] == [
        {
            "name": "get_weather",
            "description": "weather",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
        {"name": "now", "input_schema": {"type": "object", "properties": {}}},
    ]
    assert "tool_choice" not in body


@pytest.mark.parametrize(
    ("choice", "parallel", "expected"),
    [
        ("auto", None, {"type": "auto"}),
        ("none", None, {"type": "none"}),
        ("required", None, {"type": "any"}),
        ({"type": "function", "function": {"name": "now"}}, None, {"type": "tool", "name": "now"}),
        (None, False, {"type": "auto", "disable_parallel_tool_use": True}),
        ("required", False, {"type": "any", "disable_parallel_tool_use": True}),
        ("auto", True, {"type": "auto"}),
    ],
)
def test_tool_choice(choice: Any, parallel: bool | None, expected: dict[str, Any]) -> None:
    fields: dict[str, Any] = {"tools": TOOLS}
    if choice is not None:
        fields["tool_choice"] = choice
    if parallel is not None:
        fields["parallel_tool_calls"] = parallel
    assert translate(**fields)["tool_choice"] == expected


def test_tool_choice_without_tools_is_dropped_and_bad_ones_rejected() -> None:
    assert "tool_choice" not in translate(tool_choice="required")
    assert rejected(tools=TOOLS, tool_choice="sometimes").param == "tool_choice"
    assert rejected(tools=[{"type": "custom", "custom": {}}]).param == "tools[0].type"


def test_sampling_limits_and_stop() -> None:
    body = translate(max_tokens=100, temperature=0.5, top_p=0.9, stop="END", user="u1", seed=3, n=1)
    assert body["max_tokens"] == 100
    assert (body["temperature"], body["top_p"]) == (0.5, 0.9)
    assert body["stop_sequences"] == ["END"]
    assert body["metadata"] == {"user_id": "u1"}
    assert "seed" not in body
    assert translate(max_completion_tokens=50, max_tokens=100)["max_tokens"] == 50
    assert translate(stop=["a", "b"])["stop_sequences"] == ["a", "b"]
    assert "stop_sequences" not in translate(stop=[])


def test_ignored_fields_are_not_forwarded() -> None:
    body = translate(
        frequency_penalty=0.5,
        presence_penalty=0.5,
        logit_bias={"1": 1},
        seed=1,
        service_tier="auto",
        store=True,
        metadata={"a": "b"},
        stream_options={"include_usage": True},
        unknown_vendor_field=1,
    )
    assert set(body) == {"model", "max_tokens", "messages"}


def test_stream_flag() -> None:
    assert translate(stream=True)["stream"] is True


@pytest.mark.parametrize(
    ("effort", "max_tokens", "budget", "expected_max"),
    [
        ("low", None, 1024, 1024 + 4096),
        ("medium", None, 4096, 4096 + 4096),
        ("high", None, 16384, 16384 + 4096),
        ("high", 8000, 7999, 8000),
        ("medium", 20000, 4096, 20000),
    ],
)
def test_reasoning_effort(
    effort: str, max_tokens: int | None, budget: int, expected_max: int
) -> None:
    fields: dict[str, Any] = {"reasoning_effort": effort}
    if max_tokens is not None:
        fields["max_tokens"] = max_tokens
    body = translate(**fields)
    assert body["thinking"] == {"type": "enabled", "budget_tokens": budget}
    assert body["max_tokens"] == expected_max


def test_reasoning_effort_rejections() -> None:
    assert rejected(reasoning_effort="extreme").param == "reasoning_effort"
    assert rejected(reasoning_effort="low", max_tokens=500).param == "max_tokens"
    assert "thinking" not in translate(reasoning_effort="none")


def test_response_format_json_schema_is_a_forced_tool() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    body = translate(
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        }
    )
    assert body["tools"] == [
        {
            "name": "answer",
            "input_schema": schema,
            "description": "Respond with the answer as this tool's input.",
        }
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "answer"}
    json_object = translate(response_format={"type": "json_object"})
    assert json_object["tool_choice"] == {"type": "tool", "name": "json_response"}
    assert "tools" not in translate(response_format={"type": "text"})


def test_response_format_rejections() -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "a", "schema": {}}}
    assert rejected(response_format=fmt, tools=TOOLS).param == "response_format"
    assert rejected(response_format=fmt, reasoning_effort="low").param == "response_format"
    assert rejected(response_format={"type": "json_schema"}).param == "response_format"
    assert rejected(response_format={"type": "yaml"}).param == "response_format"


def test_unservable_fields_are_rejected() -> None:
    assert rejected(n=2).param == "n"
    assert rejected(logprobs=True).param == "logprobs"
    assert rejected(modalities=["text", "audio"]).param == "modalities"


@pytest.mark.parametrize(
    ("model", "limit"),
    [
        ("claude-sonnet-4-5-20250929", 64000),
        ("claude-opus-4-1-20250805", 32000),
        ("claude-3-5-haiku-latest", 8192),
        ("claude-3-haiku-20240307", 4096),
        ("us.anthropic.claude-sonnet-4-20250514-v1:0", 64000),
        ("claude-future-9", 4096),
    ],
)
def test_max_tokens_defaults_to_the_models_own_limit(model: str, limit: int) -> None:
    from gateway.providers.anthropic.request import default_max_tokens

    assert default_max_tokens(model) == limit
