"""The request a model without tools gets: tools described, history as text."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from gateway.emulation.request import emulate_tools
from gateway.errors import BadRequest
from gateway.wire.openai_chat import ChatRequest

TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather now",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def emulate(body: dict[str, Any]) -> Any:
    body = {"model": "m", **body}
    return emulate_tools(msgspec.convert(body, ChatRequest), body)


def test_no_tools_and_no_history_is_left_alone() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    request = msgspec.convert(body, ChatRequest)
    result = emulate_tools(request, body)
    assert result.request is request
    assert result.body is body
    assert result.emulation is None


def test_tools_leave_and_a_system_prompt_describes_them() -> None:
    result = emulate(
        {
            "messages": [{"role": "user", "content": "hi", "x-extra": 1}],
            "tools": [TOOL],
            "tool_choice": "auto",
            "parallel_tool_calls": False,
            "temperature": 0.2,
        }
    )
    body = result.body
    assert set(body) == {"model", "messages", "temperature"}
    system, user = body["messages"]
    assert user == {"role": "user", "content": "hi", "x-extra": 1}  # the client's own object
    assert system["role"] == "system"
    prompt = system["content"]
    assert '{"name":"get_weather","description":"Weather now","parameters":' in prompt
    assert "at most one tool" in prompt
    assert "If no tool is needed" in prompt
    assert result.request.tools is msgspec.UNSET
    assert result.request.messages[0].content == prompt
    assert result.emulation is not None
    assert result.emulation.names == {"get_weather"}


def test_prompt_joins_the_clients_system_message() -> None:
    result = emulate(
        {
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "user", "content": "hi"},
            ],
            "tools": [TOOL],
            "tool_choice": "required",
        }
    )
    first = result.body["messages"][0]
    assert first["role"] == "developer"
    assert first["content"].startswith("Be brief.\n\nYou can call tools.")
    assert "You must call at least one tool" in first["content"]
    assert len(result.body["messages"]) == 2


def test_named_choice_limits_the_names() -> None:
    second = {"type": "function", "function": {"name": "get_user"}}
    result = emulate(
        {
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [TOOL, second],
            "tool_choice": {"type": "function", "function": {"name": "get_user"}},
        }
    )
    assert result.emulation.names == {"get_user"}
    assert 'You must call the tool "get_user"' in result.body["messages"][0]["content"]


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
        ({"tool_choice": "sometimes"}, "tool_choice"),
        ({"tools": [TOOL, {"type": "web_search"}]}, "tools[1].type"),
    ],
)
def test_bad_tool_settings_are_400s(extra: dict[str, Any], param: str) -> None:
    body = {"messages": [{"role": "user", "content": "hi"}], "tools": [TOOL], **extra}
    with pytest.raises(BadRequest) as raised:
        emulate(body)
    assert raised.value.param == param


def test_history_without_tools_is_rendered_and_nothing_is_scanned() -> None:
    result = emulate(
        {
            "messages": [
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": "Checking.",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": "not json"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "21"}]},
                {"role": "user", "content": "thanks"},
            ]
        }
    )
    assert result.emulation is None
    messages = result.body["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "user"]
    assert messages[1]["content"] == (
        'Checking.\n\n{"tool_calls":[{"name":"get_weather","arguments":"not json"}]}'
    )
    assert messages[2]["content"] == "Result of the tool call get_weather (c1):\n21"
    assert [m.role for m in result.request.messages] == ["user", "assistant", "user", "user"]
    assert result.request.messages[1].tool_calls is msgspec.UNSET
