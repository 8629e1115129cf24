"""typed(body, ChatRequest): every request clients send converts; a bad one names its field."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest

from gateway.errors import BadRequest
from gateway.server.request_body import typed
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import StreamOptions

IMAGE = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk"
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
            "required": ["city"],
            "additionalProperties": False,
        },
        "strict": True,
    },
}

# Every field today's clients (openai-python, langchain, the Agents SDK, LiteLLM) put in a
# chat request, with the shapes they use.
FULL: dict[str, Any] = {
    "model": "smart",
    "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": [{"type": "text", "text": "Answer in French."}]},
        {
            "role": "user",
            "name": "ann",
            "content": [
                {"type": "text", "text": "What is in this picture?"},
                {"type": "image_url", "image_url": {"url": IMAGE, "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}},
                {"type": "file", "file": {"file_id": "file-abc"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {"id": "call_2", "function": {"name": "get_weather", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "18C"},
        {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "?"}]},
        {"role": "assistant", "content": "", "refusal": None, "reasoning_content": "hmm"},
        {"role": "user", "content": "and tomorrow?"},
    ],
    "tools": [WEATHER_TOOL, {"type": "function", "function": {"name": "no_params"}}],
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "response_format": {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "strict": True,
            "schema": {"type": "object", "properties": {"text": {"type": "string"}}},
        },
    },
    "stream": True,
    "stream_options": {"include_usage": True, "include_obfuscation": False},
    "n": 1,
    "logprobs": True,
    "top_logprobs": 3,
    "stop": ["\n\n", "END"],
    "seed": 42,
    "user": "user-1234",
    "metadata": {"team": "ml", "run": "7"},
    "max_tokens": 256,
    "max_completion_tokens": 512,
    "reasoning_effort": "low",
    "temperature": 0.2,
    "top_p": 1,
    "frequency_penalty": 0,
    "presence_penalty": 0.5,
    "logit_bias": {"50256": -100, "198": 2.5},
    "modalities": ["text", "audio"],
    "audio": {"voice": "alloy", "format": "wav"},
    "prediction": {"type": "content", "content": "The weather in Paris is"},
    "service_tier": "auto",
    "store": False,
    "verbosity": "low",
    "web_search_options": {"search_context_size": "low"},
    "prompt_cache_key": "tenant-1",
    "safety_identifier": "hash-of-user",
}


def with_(**changes: Any) -> dict[str, Any]:
    body = copy.deepcopy(FULL)
    body.update(changes)
    return body


def test_the_full_request_converts() -> None:
    request = typed(copy.deepcopy(FULL), ChatRequest)
    assert request.model == "smart"
    assert len(request.messages) == len(FULL["messages"])
    assert request.stream is True
    assert isinstance(request.stream_options, StreamOptions)
    assert request.stream_options.include_obfuscation is False
    assert isinstance(request.tools, list)
    assert [t.function.name for t in request.tools if t.function] == ["get_weather", "no_params"]
    assert request.metadata == {"team": "ml", "run": "7"}


def test_conversion_keeps_empty_null_and_absent_apart() -> None:
    request = typed(copy.deepcopy(FULL), ChatRequest)
    assistant_with_calls, empty_assistant = request.messages[3], request.messages[6]
    assert assistant_with_calls.content is None
    assert empty_assistant.content == ""
    assert empty_assistant.refusal is None
    assert empty_assistant.tool_calls is UNSET
    assert request.messages[0].name is UNSET


@pytest.mark.parametrize(
    "changes",
    [
        {"tool_choice": "none"},
        {"tool_choice": "required"},
        {"tool_choice": {"type": "function", "function": {"name": "get_weather"}}},
        {"tool_choice": {"type": "allowed_tools", "allowed_tools": {"mode": "auto", "tools": []}}},
        {"stop": "END"},
        {"stop": None},
        {"temperature": 1},
        {"temperature": 0.7},
        {"temperature": 0},
        {"response_format": {"type": "json_object"}},
        {"response_format": {"type": "text"}},
        {"stream": False, "stream_options": None},
        {"n": 2, "logprobs": False, "top_logprobs": None},
        {"max_tokens": None, "max_completion_tokens": 1},
        {"reasoning_effort": "minimal", "verbosity": "high", "service_tier": "flex"},
        {"modalities": ["text"], "audio": None},
        {"tools": [{"type": "custom", "custom": {"name": "grep", "format": {"type": "text"}}}]},
        {"parallel_tool_calls": False},
        {"extra_field_from_a_newer_sdk": {"anything": [1, 2, 3]}},  # forwarded, not checked
    ],
)
def test_client_variants_convert(changes: dict[str, Any]) -> None:
    request = typed(with_(**changes), ChatRequest)
    fields = {f.name for f in msgspec.structs.fields(ChatRequest)}
    for name, value in changes.items():
        if name in fields and name != "tools":  # Tool keeps only the fields it reads
            assert msgspec.to_builtins(getattr(request, name)) == value, name


def test_every_optional_field_may_be_null() -> None:
    optional = [f.name for f in msgspec.structs.fields(ChatRequest) if not f.required]
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": None}]}
    body |= dict.fromkeys(optional)
    request = typed(body, ChatRequest)
    for name in optional:
        assert getattr(request, name) is None, name


def test_minimal_request_leaves_every_optional_field_unset() -> None:
    request = typed({"model": "m", "messages": []}, ChatRequest)
    optional = [f.name for f in msgspec.structs.fields(ChatRequest) if not f.required]
    assert all(getattr(request, name) is UNSET for name in optional)


def bad(body: dict[str, Any]) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        typed(body, ChatRequest)
    return info.value


def user(content: Any = "hi") -> dict[str, Any]:
    return {"role": "user", "content": content}


TOOL_HISTORY = {
    "role": "assistant",
    "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"city": "Paris"}}}],
}


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "m", "messages": [user(5)]}, "messages[0].content"),
        ({"model": "m", "messages": [user(True)]}, "messages[0].content"),
        (
            {"model": "m", "messages": [user(), TOOL_HISTORY]},
            "messages[1].tool_calls[0].function.arguments",
        ),
        ({"model": "m", "messages": [], "stream": "yes"}, "stream"),
        ({"model": "m", "messages": [], "stream": 1}, "stream"),
        ({"model": "m", "messages": [], "temperature": "hot"}, "temperature"),
        ({"model": "m", "messages": [], "max_tokens": 10.5}, "max_tokens"),
        ({"model": "m", "messages": [], "n": "2"}, "n"),
        ({"model": "m", "messages": [], "stop": [1]}, "stop[0]"),
        ({"model": "m", "messages": [], "tools": {"type": "function"}}, "tools"),
        (
            {"model": "m", "messages": [], "stream_options": {"include_usage": "yes"}},
            "stream_options.include_usage",
        ),
        ({"model": 4, "messages": []}, "model"),
        ({"model": "m", "messages": "hi"}, "messages"),
        ({"model": "m", "messages": [user(), "hi"]}, "messages[1]"),
    ],
)
def test_wrong_type_names_the_field_path(body: dict[str, Any], param: str) -> None:
    err = bad(body)
    assert err.param == param
    assert err.status == 400
    assert err.type == "invalid_request_error"
    assert err.code == "invalid_request"
    assert f"'{param}'" in err.message
    readable(err.message)


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": []}, "model"),
        ({"model": "m"}, "messages"),
        ({}, "model"),
        ({"model": "m", "messages": [{"content": "x"}]}, "messages[0].role"),
        ({"model": "m", "messages": [user(), {"content": "x"}]}, "messages[1].role"),
        (
            {
                "model": "m",
                "messages": [user(), {"role": "assistant", "tool_calls": [{"id": "c"}]}],
            },
            "messages[1].tool_calls[0].function",
        ),
        (
            {"model": "m", "messages": [], "tools": [{"type": "function", "function": {}}]},
            "tools[0].function.name",
        ),
        ({"model": "m", "messages": [], "tools": [{"function": {"name": "f"}}]}, "tools[0].type"),
    ],
)
def test_missing_field_names_its_path(body: dict[str, Any], param: str) -> None:
    err = bad(body)
    assert err.param == param
    assert err.status == 400
    assert err.message == f"Missing required parameter: '{param}'"


def readable(message: str) -> None:
    """Words a person can act on: no msgspec path syntax, no Python reprs, one line."""
    assert message[:1].isupper()
    assert "$." not in message
    assert " - at " not in message
    assert "\n" not in message
    assert "expected" in message
    assert "got" in message


def test_wrong_type_message_says_what_was_expected_and_what_came() -> None:
    err = bad({"model": "m", "messages": [], "temperature": "hot"})
    assert err.message.startswith("Invalid type for 'temperature': expected ")
    assert "float" in err.message
    assert err.message.endswith("got `str`")


def test_unknown_role_names_the_role_and_the_value() -> None:
    err = bad({"model": "m", "messages": [user(), {"role": "robot", "content": "x"}]})
    assert err.param == "messages[1].role"
    assert "'messages[1].role'" in err.message
    assert "'robot'" in err.message


def test_bad_value_inside_a_mapping_names_the_mapping() -> None:
    err = bad({"model": "m", "messages": [], "metadata": {"team": 1}})
    assert err.param in ("metadata", "metadata.team")
