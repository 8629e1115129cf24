"""Responses requests -> canonical chat requests: every field, and the 400s with `param`."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.errors import BadRequest
from gateway.inbound.responses_request import ResponsesRequest
from gateway.inbound.responses_request import StoredResponse
from gateway.inbound.responses_request import history_for_native
from gateway.inbound.responses_request import input_items
from gateway.inbound.responses_request import stored_decoder
from gateway.inbound.responses_request import stored_encoder
from gateway.inbound.responses_request import to_chat
from gateway.server.request_body import typed
from gateway.wire.openai_chat import ChatRequest

WEATHER_TOOL = {
    "type": "function",
    "name": "get_weather",
    "description": "weather by city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    "strict": True,
}


def chat_of(body: dict[str, Any], history: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    request = typed(body, ResponsesRequest)
    canonical, chat = to_chat(request, body, history or [])
    assert msgspec.convert(chat, ChatRequest) == canonical
    return chat


def rejected(body: dict[str, Any]) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        chat_of(body)
    return info.value


def test_string_input_is_one_user_message() -> None:
    chat = chat_of({"model": "m", "input": "hi"})
    assert chat == {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": False}


def test_empty_string_input_stays_empty_string() -> None:
    assert chat_of({"model": "m", "input": ""})["messages"] == [{"role": "user", "content": ""}]


def test_instructions_lead_as_system_message_even_when_empty() -> None:
    chat = chat_of({"model": "m", "instructions": "be brief", "input": "hi"})
    assert chat["messages"][0] == {"role": "system", "content": "be brief"}
    chat = chat_of({"model": "m", "instructions": "", "input": "hi"})
    assert chat["messages"][0] == {"role": "system", "content": ""}
    chat = chat_of({"model": "m", "instructions": None, "input": "hi"})
    assert [m["role"] for m in chat["messages"]] == ["user"]


def test_message_items_every_role_and_part() -> None:
    items = [
        {"role": "system", "content": "sys"},
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "d"}]},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                {"type": "input_image", "image_url": "https://x/y.png"},
            ],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "seen"}]},
        {
            "role": "assistant",
            "content": [{"type": "output_text", "text": "a"}, {"type": "output_text", "text": "b"}],
        },
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    ]
    assert chat_of({"model": "m", "input": items})["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {
                    "type": "image_url",
                    "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"},
                },
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
        {"role": "assistant", "content": "seen"},
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        },
        {"role": "assistant", "content": None, "refusal": "no"},
    ]


def test_function_calls_group_and_outputs_become_tool_messages() -> None:
    items = [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_a",
            "name": "w",
            "arguments": '{"c":"P"}',
        },
        {"type": "function_call", "call_id": "call_b", "name": "w", "arguments": ""},
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {
            "type": "function_call_output",
            "call_id": "call_b",
            "output": [{"type": "input_text", "text": "rain"}],
        },
        {"type": "function_call", "call_id": "call_c", "name": "t", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_c", "output": ""},
    ]
    messages = chat_of({"model": "m", "input": items})["messages"]
    assert messages == [
        {"role": "user", "content": "weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "w", "arguments": '{"c":"P"}'},
                },
                {"id": "call_b", "type": "function", "function": {"name": "w", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_b", "content": [{"type": "text", "text": "rain"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_c", "type": "function", "function": {"name": "t", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_c", "content": ""},
    ]


def test_sampling_and_limits_and_identity_fields() -> None:
    chat = chat_of(
        {
            "model": "m",
            "input": "hi",
            "stream": True,
            "max_output_tokens": 99,
            "temperature": 0.2,
            "top_p": 0.9,
            "parallel_tool_calls": False,
            "user": "u-1",
            "safety_identifier": "s-1",
            "prompt_cache_key": "k",
            "service_tier": "flex",
            "store": True,
            "metadata": {"a": "b"},
            "truncation": "disabled",
            "include": ["reasoning.encrypted_content"],
            "top_logprobs": 0,
            "max_tool_calls": 3,
            "stream_options": {"include_obfuscation": False},
        }
    )
    assert chat == {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "max_completion_tokens": 99,
        "temperature": 0.2,
        "top_p": 0.9,
        "parallel_tool_calls": False,
        "user": "u-1",
        "safety_identifier": "s-1",
        "prompt_cache_key": "k",
        "service_tier": "flex",
    }


def test_null_values_are_forwarded_as_null() -> None:
    chat = chat_of({"model": "m", "input": "hi", "temperature": None, "max_output_tokens": None})
    assert chat["temperature"] is None
    assert chat["max_completion_tokens"] is None


def test_tools_are_nested_as_chat_functions() -> None:
    bare = {
        "type": "function",
        "name": "now",
        "description": None,
        "parameters": None,
        "strict": None,
    }
    chat = chat_of({"model": "m", "input": "hi", "tools": [WEATHER_TOOL, bare]})
    assert chat["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather by city",
                "parameters": WEATHER_TOOL["parameters"],
                "strict": True,
            },
        },
        {"type": "function", "function": {"name": "now", "strict": None}},
    ]
    assert "tools" not in chat_of({"model": "m", "input": "hi", "tools": []})


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        (
            {"type": "function", "name": "get_weather"},
            {"type": "function", "function": {"name": "get_weather"}},
        ),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    chat = chat_of({"model": "m", "input": "hi", "tools": [WEATHER_TOOL], "tool_choice": choice})
    assert chat["tool_choice"] == expected


def test_text_format_and_verbosity() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    fmt = {
        "type": "json_schema",
        "name": "count",
        "schema": schema,
        "strict": True,
        "description": "d",
    }
    chat = chat_of({"model": "m", "input": "hi", "text": {"format": fmt, "verbosity": "low"}})
    assert chat["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "count", "schema": schema, "description": "d", "strict": True},
    }
    assert chat["verbosity"] == "low"
    for kind in ("text", "json_object"):
        chat = chat_of({"model": "m", "input": "hi", "text": {"format": {"type": kind}}})
        assert chat["response_format"] == {"type": kind}


def test_reasoning_effort_and_summary() -> None:
    chat = chat_of(
        {"model": "m", "input": "hi", "reasoning": {"effort": "high", "summary": "auto"}}
    )
    assert chat["reasoning_effort"] == "high"
    assert "reasoning_effort" not in chat_of(
        {"model": "m", "input": "hi", "reasoning": {"summary": "auto"}}
    )


def test_history_comes_after_instructions_and_before_input() -> None:
    history = [
        {"type": "message", "role": "user", "content": "first"},
        {
            "type": "message",
            "id": "msg_1",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "one", "annotations": [], "logprobs": []}],
        },
    ]
    chat = chat_of({"model": "m", "instructions": "new", "input": "second"}, history)
    assert chat["messages"] == [
        {"role": "system", "content": "new"},
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "one"},
        {"role": "user", "content": "second"},
    ]


def test_stored_response_round_trip_and_native_history() -> None:
    stored = StoredResponse(
        id="resp_1",
        input=[{"type": "message", "role": "user", "content": "q"}],
        output=[
            {
                "type": "reasoning",
                "id": "rs_1",
                "status": "completed",
                "content": [],
                "summary": [],
            },
            {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "n", "arguments": "{}"},
        ],
    )
    assert stored_decoder.decode(stored_encoder.encode(stored)) == stored
    assert [i.get("id") for i in history_for_native(stored)] == [None, "rs_2", "fc_1"]


def test_input_items() -> None:
    assert input_items(msgspec.convert({"model": "m"}, ResponsesRequest)) == []
    items = [{"role": "user", "content": "x"}]
    assert input_items(msgspec.convert({"model": "m", "input": items}, ResponsesRequest)) == items


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"input": []}, "input"),
        ({}, "input"),
        ({"input": [{"type": "item_reference", "id": "x"}]}, "input[0].type"),
        ({"input": ["hi"]}, "input[0]"),
        ({"input": [{"content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user"}]}, "input[0].content"),
        ({"input": [{"role": "user", "content": 5}]}, "input[0].content"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_audio"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": 1}]}]},
            "input[0].content[0].text",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "f"}]}]},
            "input[0].content[0].file_id",
        ),
        (
            {
                "input": [
                    {"role": "assistant", "content": [{"type": "input_image", "image_url": "u"}]}
                ]
            },
            "input[0].content[0].type",
        ),
        (
            {"input": [{"type": "function_call", "name": "n", "arguments": "{}"}]},
            "input[0].call_id",
        ),
        (
            {"input": [{"type": "function_call", "call_id": "c", "name": "n", "arguments": {}}]},
            "input[0].arguments",
        ),
        ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": 3}]},
            "input[0].output",
        ),
        (
            {
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_image", "image_url": "u"}],
                    }
                ]
            },
            "input[0].output[0].type",
        ),
        ({"input": "x", "tools": [{"type": "web_search"}]}, "tools[0].type"),
        ({"input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        (
            {"input": "x", "tools": [{"type": "function", "name": "n", "parameters": "{}"}]},
            "tools[0].parameters",
        ),
        ({"input": "x", "tool_choice": "sometimes"}, "tool_choice"),
        ({"input": "x", "tool_choice": {"type": "file_search"}}, "tool_choice.type"),
        ({"input": "x", "tool_choice": {"type": "function"}}, "tool_choice.name"),
        ({"input": "x", "text": {"format": {"type": "yaml"}}}, "text.format.type"),
        ({"input": "x", "text": {"format": "json"}}, "text.format"),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}},
            "text.format.schema",
        ),
        (
            {"input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}},
            "text.format.name",
        ),
        ({"input": "x", "reasoning": {"effort": 3}}, "reasoning.effort"),
        ({"input": "x", "background": True}, "background"),
        ({"input": "x", "conversation": "conv_1"}, "conversation"),
        ({"input": "x", "prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"input": 5}, "input"),
        ({"input": "x", "temperature": "hot"}, "temperature"),
        ({"input": "x", "stream": "yes"}, "stream"),
        ({"input": "x", "metadata": {"a": 1}}, "metadata"),
        ({"input": "x", "tools": {"type": "function"}}, "tools"),
        ({"input": "x", "previous_response_id": 7}, "previous_response_id"),
    ],
)
def test_bad_input_names_the_param(body: dict[str, Any], param: str) -> None:
    err = rejected({"model": "m", **body})
    assert err.param == param
    assert err.status == 400
