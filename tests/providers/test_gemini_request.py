"""OpenAI chat request -> Gemini generateContent body: every translation rule, the empty
content cases, and the fields rejected with a 400."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.errors import BadRequest
from gateway.providers.base import UpstreamCall
from gateway.providers.gemini.request import build_body
from gateway.providers.gemini.request import gemini_schema
from gateway.providers.registry import provider_config
from gateway.wire.openai_chat import ChatRequest


def body_for(client: dict[str, Any]) -> dict[str, Any]:
    client = {"model": "g", **client}
    call = UpstreamCall(
        request=msgspec.convert(client, ChatRequest),
        body=client,
        provider=provider_config(name="gem", kind="gemini"),
        key=None,
        model="gemini-2.5-flash",
        stream=True,
        request_id="r",
    )
    out: dict[str, Any] = json.loads(build_body(call))
    return out


def user(content: Any) -> dict[str, Any]:
    return {"role": "user", "content": content}


def assistant_calls(*calls: tuple[str, str, str], content: Any = None) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "tool_calls": [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in calls
        ],
    }


def test_minimal_request_has_contents_only() -> None:
    assert body_for({"messages": [user("hi")]}) == {
        "contents": [{"role": "user", "parts": [{"text": "hi"}]}]
    }


def test_system_and_developer_become_system_instruction() -> None:
    body = body_for(
        {
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "developer", "content": [{"type": "text", "text": "Use French."}]},
                {"role": "system", "content": ""},
                user("hi"),
            ]
        }
    )
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}, {"text": "Use French."}]}
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]


def test_roles_and_merging_of_same_role_turns() -> None:
    body = body_for(
        {
            "messages": [
                user("a"),
                user("b"),
                {"role": "assistant", "content": "c"},
                {"role": "assistant", "content": "d"},
                user("e"),
            ]
        }
    )
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "a"}, {"text": "b"}]},
        {"role": "model", "parts": [{"text": "c"}, {"text": "d"}]},
        {"role": "user", "parts": [{"text": "e"}]},
    ]


def test_images_inline_and_by_url() -> None:
    body = body_for(
        {
            "messages": [
                user(
                    [
                        {"type": "text", "text": "what?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
                        {
                            "type": "image_url",
                            "image_url": {"url": "https://x.test/a/cat.webp?s=1"},
                        },
                        {"type": "image_url", "image_url": {"url": "https://x.test/img"}},
                        {"type": "text", "text": ""},
                    ]
                )
            ]
        }
    )
    assert body["contents"][0]["parts"] == [
        {"text": "what?"},
        {"inlineData": {"mimeType": "image/png", "data": "iVBO"}},
        {"fileData": {"fileUri": "https://x.test/a/cat.webp?s=1", "mimeType": "image/webp"}},
        {"fileData": {"fileUri": "https://x.test/img", "mimeType": "image/jpeg"}},
    ]


def test_unsupported_part_type_is_a_400() -> None:
    with pytest.raises(BadRequest) as info:
        body_for({"messages": [user([{"type": "refusal", "refusal": "no"}])]})
    assert info.value.param == "messages[0].content[0]"


def test_tool_calls_and_results_round_trip() -> None:
    body = body_for(
        {
            "messages": [
                user("weather and time?"),
                assistant_calls(
                    ("c1", "get_weather", '{"city": "Paris"}'), ("c2", "get_time", ""), content=""
                ),
                {"role": "tool", "tool_call_id": "c1", "content": '{"temp": 30}'},
                {"role": "tool", "tool_call_id": "c2", "content": "12:00"},
                {"role": "tool", "tool_call_id": "c1", "content": "[1, 2]"},
            ]
        }
    )
    assert body["contents"][1:] == [
        {
            "role": "model",
            "parts": [
                {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                {"functionCall": {"name": "get_time", "args": {}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"temp": 30}}},
                {"functionResponse": {"name": "get_time", "response": {"content": "12:00"}}},
                {"functionResponse": {"name": "get_weather", "response": {"content": "[1, 2]"}}},
            ],
        },
    ]


def test_tool_result_with_empty_content_keeps_the_empty_string() -> None:
    body = body_for(
        {
            "messages": [
                user("go"),
                assistant_calls(("c1", "f", "{}")),
                {"role": "tool", "tool_call_id": "c1", "content": ""},
            ]
        }
    )
    assert body["contents"][2]["parts"] == [
        {"functionResponse": {"name": "f", "response": {"content": ""}}}
    ]


def test_tool_result_for_an_unknown_call_is_a_400() -> None:
    with pytest.raises(BadRequest) as info:
        body_for({"messages": [user("go"), {"role": "tool", "tool_call_id": "x", "content": "1"}]})
    assert info.value.param == "messages[1].tool_call_id"


@pytest.mark.parametrize("arguments", ["{bad", "[1]"])
def test_bad_tool_call_arguments_are_a_400(arguments: str) -> None:
    with pytest.raises(BadRequest) as info:
        body_for({"messages": [user("go"), assistant_calls(("c1", "f", arguments))]})
    assert info.value.param == "messages[1].tool_calls[0]"


def test_empty_assistant_content_never_becomes_an_empty_part() -> None:
    body = body_for(
        {
            "messages": [
                user("one"),
                {"role": "assistant", "content": ""},
                user("two"),
                {"role": "assistant", "content": [{"type": "text", "text": ""}]},
                user("three"),
            ]
        }
    )
    # the empty turns are dropped and the user turns around them merged
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "one"}, {"text": "two"}, {"text": "three"}]}
    ]


def test_a_request_left_without_any_turn_stays_valid() -> None:
    body = body_for({"messages": [{"role": "system", "content": "sys"}, user("")]})
    assert body["contents"] == [{"role": "user", "parts": [{"text": " "}]}]
    assert body["systemInstruction"] == {"parts": [{"text": "sys"}]}


def test_no_part_in_any_body_is_empty_text() -> None:
    body = body_for(
        {
            "messages": [
                {"role": "system", "content": ""},
                user(""),
                assistant_calls(("c1", "f", ""), content=""),
                {"role": "tool", "tool_call_id": "c1", "content": "ok"},
                {"role": "assistant", "content": ""},
            ]
        }
    )
    parts = [p for c in body["contents"] for p in c["parts"]]
    assert {"text": ""} not in parts
    assert all(c["parts"] for c in body["contents"])
    assert "systemInstruction" not in body


def test_tools_are_declared_with_a_cleaned_schema() -> None:
    parameters = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "City"},
            "unit": {"type": ["string", "null"], "enum": ["c", "f"]},
            "tags": {"type": "array", "items": {"type": "string", "additionalProperties": False}},
            "additionalProperties": {"type": "integer"},  # a property of that name is kept
        },
        "required": ["city"],
        "additionalProperties": False,
    }
    body = body_for(
        {
            "messages": [user("hi")],
            "tools": [
                {
                    "type": "function",
                    "function": {"name": "w", "description": "Weather", "parameters": parameters},
                },
                {"type": "function", "function": {"name": "now", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "bare"}},
            ],
        }
    )
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "w",
                    "description": "Weather",
                    "parameters": {
                        "type": "OBJECT",
                        "properties": {
                            "city": {"type": "STRING", "description": "City"},
                            "unit": {"type": "STRING", "nullable": True, "enum": ["c", "f"]},
                            "tags": {"type": "ARRAY", "items": {"type": "STRING"}},
                            "additionalProperties": {"type": "INTEGER"},
                        },
                        "required": ["city"],
                    },
                },
                {"name": "now"},
                {"name": "bare"},
            ]
        }
    ]


def test_const_becomes_enum() -> None:
    assert gemini_schema({"const": "x", "anyOf": [{"type": ["null"]}, {"type": "null"}]}) == {
        "enum": ["x"],
        "anyOf": [{"nullable": True}, {"type": "NULL"}],
    }


@pytest.mark.parametrize(
    ("choice", "config"),
    [
        ("auto", {"mode": "AUTO"}),
        ("none", {"mode": "NONE"}),
        ("required", {"mode": "ANY"}),
        (
            {"type": "function", "function": {"name": "w"}},
            {"mode": "ANY", "allowedFunctionNames": ["w"]},
        ),
    ],
)
def test_tool_choice(choice: Any, config: dict[str, Any]) -> None:
    body = body_for({"messages": [user("hi")], "tool_choice": choice})
    assert body["toolConfig"] == {"functionCallingConfig": config}


def test_bad_tool_choice_is_a_400() -> None:
    with pytest.raises(BadRequest) as info:
        body_for({"messages": [user("hi")], "tool_choice": "sometimes"})
    assert info.value.param == "tool_choice"


def test_generation_config() -> None:
    body = body_for(
        {
            "messages": [user("hi")],
            "max_completion_tokens": 100,
            "max_tokens": 5,
            "temperature": 0.2,
            "top_p": 0.9,
            "stop": "END",
            "seed": 7,
            "n": 1,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.25,
            "response_format": {"type": "json_object"},
        }
    )
    assert body["generationConfig"] == {
        "maxOutputTokens": 100,
        "temperature": 0.2,
        "topP": 0.9,
        "stopSequences": ["END"],
        "seed": 7,
        "presencePenalty": 0.5,
        "frequencyPenalty": 0.25,
        "responseMimeType": "application/json",
    }


def test_max_tokens_and_stop_list() -> None:
    body = body_for({"messages": [user("hi")], "max_tokens": 5, "stop": ["a", "b"]})
    assert body["generationConfig"] == {"maxOutputTokens": 5, "stopSequences": ["a", "b"]}


def test_json_schema_response_format() -> None:
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "additionalProperties": False,
    }
    body = body_for(
        {
            "messages": [user("hi")],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": schema},
            },
        }
    )
    assert body["generationConfig"] == {
        "responseMimeType": "application/json",
        "responseSchema": {"type": "OBJECT", "properties": {"a": {"type": "INTEGER"}}},
    }


@pytest.mark.parametrize(
    ("effort", "thinking"),
    [
        ("low", {"thinkingBudget": 1024, "includeThoughts": True}),
        ("medium", {"thinkingBudget": 8192, "includeThoughts": True}),
        ("high", {"thinkingBudget": 24576, "includeThoughts": True}),
        ("minimal", {"thinkingBudget": 0}),
    ],
)
def test_reasoning_effort(effort: str, thinking: dict[str, Any]) -> None:
    body = body_for({"messages": [user("hi")], "reasoning_effort": effort})
    assert body["generationConfig"] == {"thinkingConfig": thinking}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("n", 2),
        ("reasoning_effort", "extreme"),
        ("response_format", {"type": "grammar"}),
        ("logprobs", True),
        ("modalities", ["text", "audio"]),
    ],
)
def test_rejected_values(field: str, value: Any) -> None:
    with pytest.raises(BadRequest) as info:
        body_for({"messages": [user("hi")], field: value})
    assert info.value.param == field


def test_ignored_fields_leave_no_trace() -> None:
    body = body_for(
        {
            "messages": [user("hi")],
            "stream_options": {"include_usage": True},
            "parallel_tool_calls": False,
            "user": "u",
            "metadata": {"a": "b"},
            "logit_bias": {"1": 1},
            "logprobs": False,
            "top_logprobs": 2,
            "modalities": ["text"],
            "audio": {"voice": "x"},
            "prediction": {"type": "content", "content": "x"},
            "web_search_options": {},
            "store": True,
            "service_tier": "auto",
            "prompt_cache_key": "k",
            "safety_identifier": "s",
            "verbosity": "low",
            "unknown_vendor_field": {"x": 1},
            "temperature": None,
        }
    )
    assert body == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
