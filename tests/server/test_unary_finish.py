"""DESIGN §4 on every inbound API, non-streamed: an OpenAI-compatible upstream answers with a
tool call and `finish_reason: "stop"`; the client still learns that the turn called tools:
Chat Completions `finish_reason: tool_calls`, Responses a completed response whose output is
the function call, Anthropic Messages `stop_reason: tool_use`. A streamed answer already did
(the accumulator); these go through the adapter's `unary_result`."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

from tests.inprocess import inprocess_gateway

MODEL = "up/calls-said-stop"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
USER = {"role": "user", "content": "weather in Paris?"}


async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
    async with (
        inprocess_gateway() as (server, _fake),
        aiohttp.ClientSession() as session,
        session.post(server.make_url(path), json=body) as response,
    ):
        assert response.status == 200, await response.text()
        answer: dict[str, Any] = await response.json()
        return answer


async def test_chat_completions_says_tool_calls() -> None:
    answer = await post(
        "/v1/chat/completions", {"model": MODEL, "messages": [USER], "tools": TOOLS}
    )
    (choice,) = answer["choices"]
    assert choice["finish_reason"] == "tool_calls"
    (call,) = choice["message"]["tool_calls"]
    assert call["id"] == "call_said_stop"
    assert json.loads(call["function"]["arguments"]) == {"city": "Paris"}


async def test_responses_ends_completed_with_the_function_call() -> None:
    tools = [{"type": "function", "name": "get_weather", "parameters": {}}]
    answer = await post("/v1/responses", {"model": MODEL, "input": "weather?", "tools": tools})
    assert answer["status"] == "completed"
    assert answer.get("incomplete_details") is None
    calls = [item for item in answer["output"] if item["type"] == "function_call"]
    assert [(c["call_id"], c["name"], c["status"]) for c in calls] == [
        ("call_said_stop", "get_weather", "completed")
    ]


async def test_messages_says_tool_use() -> None:
    tools = [{"name": "get_weather", "input_schema": {"type": "object"}}]
    body = {"model": MODEL, "max_tokens": 100, "messages": [USER], "tools": tools}
    answer = await post("/v1/messages", body)
    assert answer["stop_reason"] == "tool_use"
    uses = [block for block in answer["content"] if block["type"] == "tool_use"]
    assert [(u["id"], u["name"], u["input"]) for u in uses] == [
        ("call_said_stop", "get_weather", {"city": "Paris"})
    ]
