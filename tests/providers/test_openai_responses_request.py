"""The Responses API upstream request (`api: responses`): every chat field translated,
ignored or rejected; the native body of a Responses client; the URL and headers of the
openai and azure adapters."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.errors import BadRequest
from gateway.providers.openai.responses_request import translate_request
from gateway.wire.openai_chat import ChatRequest

HI: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]


def translate(stream: bool = True, **fields: Any) -> dict[str, Any]:
    body = {"model": "smart", "messages": HI, **fields}
    return translate_request(msgspec.convert(body, ChatRequest), body, model="gpt-5", stream=stream)


def rejected(**fields: Any) -> BadRequest:
    with pytest.raises(BadRequest) as info:
        translate(**fields)
    assert info.value.status == 400
    return info.value


def test_minimal_request() -> None:
    assert translate() == {
        "model": "gpt-5",
        "input": [{"type": "message", "role": "user", "content": "hi"}],
        "stream": True,
        "store": False,
    }
    assert translate(stream=False)["stream"] is False


def test_store_is_always_false() -> None:
    assert translate(store=True)["store"] is False


def test_messages_keep_order_roles_and_empty_strings() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "developer", "content": ""},
        {
            "role": "user",
            "content": [{"type": "text", "text": "What is "}, {"type": "text", "text": ""}],
        },
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                {"id": "call_2", "type": "function", "function": {"name": "g", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "one"},
        {
            "role": "tool",
            "tool_call_id": "call_2",
            "content": [{"type": "text", "text": "tw"}, {"type": "text", "text": "o"}],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        {"role": "assistant", "content": None, "refusal": "I can't."},
    ]
    assert translate(messages=messages)["input"] == [
        {"type": "message", "role": "system", "content": "Be brief."},
        {"type": "message", "role": "developer", "content": ""},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is "},
                {"type": "input_text", "text": ""},
            ],
        },
        {"type": "message", "role": "assistant", "content": "Let me look."},
        {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "call_2", "name": "g", "arguments": ""},
        {"type": "function_call_output", "call_id": "call_1", "output": "one"},
        {"type": "function_call_output", "call_id": "call_2", "output": "two"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "refusal", "refusal": "I can't."}],
        },
    ]


def test_assistant_with_only_tool_calls_has_no_message_item() -> None:
    messages = [
        {
            "role": "assistant",
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        }
    ]
    assert [i["type"] for i in translate(messages=messages)["input"]] == ["function_call"]


def test_images_and_files() -> None:
    content = [
        {"type": "image_url", "image_url": {"url": "https://x/cat.png", "detail": "low"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
        {"type": "file", "file": {"file_id": "file-1"}},
    ]
    (item,) = translate(messages=[{"role": "user", "content": content}])["input"]
    assert item["content"] == [
        {"type": "input_image", "image_url": "https://x/cat.png", "detail": "low"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "auto"},
        {"type": "input_file", "file_id": "file-1"},
    ]


@pytest.mark.parametrize(
    ("message", "param"),
    [
        (
            {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]},
            "messages[0].content[0].type",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
            "messages[0].content[0].image_url.url",
        ),
        ({"role": "user"}, "messages[0].content"),
        ({"role": "tool", "content": "x"}, "messages[0].tool_call_id"),
        (
            {"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url"}]},
            "messages[0].content[0]",
        ),
        ({"role": "function", "name": "f", "content": "x"}, "messages[0].role"),
        (
            {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": "u"}}]},
            "messages[0].content[0].type",
        ),
    ],
)
def test_bad_messages_are_400_with_param(message: dict[str, Any], param: str) -> None:
    assert rejected(messages=[message]).param == param


def test_tools_are_flat_and_not_strict_unless_asked() -> None:
    tools = [
        {
            "type": "function",
            "function": {
                "name": "a",
                "description": "A",
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            },
        },
        {
            "type": "function",
            "function": {"name": "b", "strict": True, "parameters": {"type": "object"}},
        },
        {"type": "function", "function": {"name": "c"}},
    ]
    assert translate(tools=tools)["tools"] == [
        {
            "type": "function",
            "name": "a",
            "description": "A",
            "parameters": {"type": "object", "properties": {"x": {"type": "string"}}},
            "strict": False,
        },
        {"type": "function", "name": "b", "parameters": {"type": "object"}, "strict": True},
        {
            "type": "function",
            "name": "c",
            "parameters": {"type": "object", "properties": {}},
            "strict": False,
        },
    ]
    assert rejected(tools=[{"type": "custom", "custom": {"name": "x"}}]).param == "tools[0].type"


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", "auto"),
        ("none", "none"),
        ("required", "required"),
        ({"type": "function", "function": {"name": "f"}}, {"type": "function", "name": "f"}),
        (
            {
                "type": "allowed_tools",
                "allowed_tools": {
                    "mode": "required",
                    "tools": [{"type": "function", "function": {"name": "f"}}],
                },
            },
            {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "f"}],
            },
        ),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    assert translate(tool_choice=choice)["tool_choice"] == expected


@pytest.mark.parametrize(
    "choice", ["sometimes", {"type": "custom", "custom": {"name": "x"}}, {"type": "function"}]
)
def test_bad_tool_choice_is_400(choice: Any) -> None:
    assert rejected(tool_choice=choice).param == "tool_choice"


def test_limits_and_sampling() -> None:
    assert translate(max_tokens=50)["max_output_tokens"] == 50
    assert translate(max_completion_tokens=70, max_tokens=50)["max_output_tokens"] == 70
    assert "max_output_tokens" not in translate(max_tokens=None)
    body = translate(temperature=0.2, top_p=0.9)
    assert (body["temperature"], body["top_p"]) == (0.2, 0.9)
    assert translate(temperature=None)["temperature"] is None  # null forwarded as null


def test_same_name_fields_are_copied_as_sent() -> None:
    fields = {
        "parallel_tool_calls": False,
        "user": "",
        "safety_identifier": "u-1",
        "metadata": {"team": "a"},
        "prompt_cache_key": "k",
        "service_tier": "flex",
        "prompt_cache_retention": "24h",
    }
    body = translate(**fields)
    assert {k: body[k] for k in fields} == fields


def test_response_format_reasoning_and_verbosity() -> None:
    schema = {"name": "out", "schema": {"type": "object"}, "strict": True}
    body = translate(
        response_format={"type": "json_schema", "json_schema": schema}, verbosity="low"
    )
    assert body["text"] == {
        "format": {
            "type": "json_schema",
            "name": "out",
            "schema": {"type": "object"},
            "strict": True,
        },
        "verbosity": "low",
    }
    assert translate(response_format={"type": "json_object"})["text"] == {
        "format": {"type": "json_object"}
    }
    assert translate(reasoning_effort="high")["reasoning"] == {"effort": "high"}
    assert rejected(response_format={"type": "xml"}).param == "response_format"
    assert (
        rejected(response_format={"type": "json_schema", "json_schema": {}}).param
        == "response_format.json_schema"
    )


def test_stream_options() -> None:
    body = translate(stream_options={"include_usage": True, "include_obfuscation": False})
    assert body["stream_options"] == {"include_obfuscation": False}
    assert "stream_options" not in translate(stream_options={"include_usage": True})
    assert "stream_options" not in translate(
        stream=False, stream_options={"include_obfuscation": False}
    )


@pytest.mark.parametrize(
    "field",
    [
        {"n": 2},
        {"logprobs": True},
        {"top_logprobs": 3},
        {"stop": ["END"]},
        {"stop": "END"},
        {"logit_bias": {"50256": -100}},
        {"frequency_penalty": 0.5},
        {"presence_penalty": -0.5},
        {"audio": {"voice": "alloy", "format": "wav"}},
        {"web_search_options": {"search_context_size": "low"}},
        {"functions": [{"name": "f"}]},
    ],
)
def test_fields_without_an_equivalent_are_400(field: dict[str, Any]) -> None:
    (name,) = field
    assert rejected(**field).param == name


@pytest.mark.parametrize(
    "field",
    [
        {"n": 1},
        {"logprobs": False},
        {"top_logprobs": 0},
        {"stop": None},
        {"stop": []},
        {"frequency_penalty": 0},
        {"presence_penalty": 0.0},
        {"logit_bias": {}},
        {"seed": 7},
        {"prediction": {"type": "content", "content": "x"}},
        {"modalities": ["text"]},
    ],
)
def test_values_that_ask_for_nothing_pass_and_are_not_sent(field: dict[str, Any]) -> None:
    body = translate(**field)
    (name,) = field
    assert name not in body


def test_audio_output_is_400() -> None:
    assert rejected(modalities=["text", "audio"]).param == "modalities"
