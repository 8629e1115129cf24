"""Request-shape limits at their edge on every inbound API: at the limit the request is
served, one over is a 400 whose `param` names the field (Anthropic's shape on /v1/messages)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.providers.embeddings import MAX_INPUTS
from tests.limits.served import Served
from tests.limits.served import served_gateway

CONFIG = """
store: {url: "memory://"}
server:
  limits: {max_messages: 4, max_tools: 2, max_tool_argument_bytes: 16}
providers:
  - {name: mock, kind: mock, mock: {chunks: 2}}
"""
# 16 bytes as UTF-8 in 12 characters (each é is two bytes); one more byte is over
ARGS_AT_LIMIT = '{"a":"éééé"}'
ARGS_OVER = '{"ab":"éééé"}'
INPUT_AT_LIMIT = {"a": "éééé"}  # encodes to ARGS_AT_LIMIT
INPUT_OVER = {"ab": "éééé"}


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[Served, aiohttp.ClientSession]]:
    async with served_gateway(CONFIG) as served, aiohttp.ClientSession() as session:
        yield served, session


async def post(
    pair: tuple[Served, aiohttp.ClientSession], path: str, body: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    served, session = pair
    async with session.post(served.url + path, json=body) as response:
        return response.status, json.loads(await response.read())


def assert_openai_400(status: int, body: dict[str, Any], param: str) -> None:
    assert status == 400, body
    error = body["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["code"] in ("too_many_items", "too_large")


def chat(messages: list[dict[str, Any]], tools: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "mock/mock", "messages": messages}
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": f"f{i}", "parameters": {"type": "object"}}}
            for i in range(tools)
        ]
    return body


def users(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


def chat_history(args: str) -> list[dict[str, Any]]:
    calls = [
        {"id": "c0", "type": "function", "function": {"name": "f", "arguments": "{}"}},
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": args}},
    ]
    return [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c0", "content": "0"},
        {"role": "tool", "tool_call_id": "c1", "content": "1"},
    ]


async def test_chat_messages_count(gateway: tuple[Served, aiohttp.ClientSession]) -> None:
    status, body = await post(gateway, "/v1/chat/completions", chat(users(4)))
    assert status == 200, body
    status, body = await post(gateway, "/v1/chat/completions", chat(users(5)))
    assert_openai_400(status, body, "messages")
    assert "limit is 4" in body["error"]["message"]


async def test_chat_tools_count(gateway: tuple[Served, aiohttp.ClientSession]) -> None:
    status, body = await post(gateway, "/v1/chat/completions", chat(users(1), tools=2))
    assert status == 200, body
    status, body = await post(gateway, "/v1/chat/completions", chat(users(1), tools=3))
    assert_openai_400(status, body, "tools")


async def test_chat_tool_argument_bytes(gateway: tuple[Served, aiohttp.ClientSession]) -> None:
    assert len(ARGS_AT_LIMIT.encode()) == 16
    assert len(ARGS_AT_LIMIT) < 16
    status, body = await post(gateway, "/v1/chat/completions", chat(chat_history(ARGS_AT_LIMIT)))
    assert status == 200, body
    status, body = await post(gateway, "/v1/chat/completions", chat(chat_history(ARGS_OVER)))
    assert_openai_400(status, body, "messages[1].tool_calls[1].function.arguments")


async def test_chat_streaming_request_refused_before_commit(
    gateway: tuple[Served, aiohttp.ClientSession],
) -> None:
    body = {**chat(users(5)), "stream": True}
    status, answer = await post(gateway, "/v1/chat/completions", body)
    assert_openai_400(status, answer, "messages")


def responses(items: list[dict[str, Any]], tools: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "mock/mock", "input": items, "store": False}
    if tools:
        body["tools"] = [
            {"type": "function", "name": f"f{i}", "parameters": {"type": "object"}}
            for i in range(tools)
        ]
    return body


def response_items(n: int) -> list[dict[str, Any]]:
    return [{"role": "user", "content": f"m{i}"} for i in range(n)]


def responses_history(args: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c0", "name": "f", "arguments": args},
        {"type": "function_call_output", "call_id": "c0", "output": "0"},
    ]


async def test_responses_limits(gateway: tuple[Served, aiohttp.ClientSession]) -> None:
    status, body = await post(gateway, "/v1/responses", responses(response_items(4)))
    assert status == 200, body
    status, body = await post(gateway, "/v1/responses", responses(response_items(5)))
    assert_openai_400(status, body, "input")
    status, body = await post(gateway, "/v1/responses", responses(response_items(1), tools=2))
    assert status == 200, body
    status, body = await post(gateway, "/v1/responses", responses(response_items(1), tools=3))
    assert_openai_400(status, body, "tools")
    status, body = await post(gateway, "/v1/responses", responses(responses_history(ARGS_AT_LIMIT)))
    assert status == 200, body
    status, body = await post(gateway, "/v1/responses", responses(responses_history(ARGS_OVER)))
    assert_openai_400(status, body, "input[1].arguments")


def anthropic(messages: list[dict[str, Any]], tools: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "mock/mock", "max_tokens": 64, "messages": messages}
    if tools:
        body["tools"] = [
            {"name": f"f{i}", "input_schema": {"type": "object"}} for i in range(tools)
        ]
    return body


def turns(n: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"m{i}"} for i in range(n)]


def anthropic_history(arguments: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "t0", "name": "f", "input": arguments},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0", "content": "0"}]},
    ]


def assert_anthropic_400(status: int, body: dict[str, Any], param: str) -> None:
    assert status == 400, body
    assert body["type"] == "error"
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith(param + ": ")


async def test_messages_limits(gateway: tuple[Served, aiohttp.ClientSession]) -> None:
    status, body = await post(gateway, "/v1/messages", anthropic(turns(3)))
    assert status == 200, body
    four = [*turns(4)[:3], {"role": "assistant", "content": "x"}]
    status, body = await post(gateway, "/v1/messages", anthropic(four))
    assert status == 200, body
    status, body = await post(gateway, "/v1/messages", anthropic(turns(5)))
    assert_anthropic_400(status, body, "messages")
    status, body = await post(gateway, "/v1/messages", anthropic(turns(1), tools=2))
    assert status == 200, body
    status, body = await post(gateway, "/v1/messages", anthropic(turns(1), tools=3))
    assert_anthropic_400(status, body, "tools")
    status, body = await post(gateway, "/v1/messages", anthropic(anthropic_history(INPUT_AT_LIMIT)))
    assert status == 200, body
    status, body = await post(gateway, "/v1/messages", anthropic(anthropic_history(INPUT_OVER)))
    assert_anthropic_400(status, body, "messages[1].content[1].input")


async def test_count_tokens_is_limited_too(gateway: tuple[Served, aiohttp.ClientSession]) -> None:
    status, body = await post(gateway, "/v1/messages/count_tokens", anthropic(turns(5)))
    assert_anthropic_400(status, body, "messages")


async def test_embeddings_input_count(gateway: tuple[Served, aiohttp.ClientSession]) -> None:
    at_limit = {"model": "mock/mock", "input": ["x"] * MAX_INPUTS}
    status, body = await post(gateway, "/v1/embeddings", at_limit)
    assert status == 200, body
    assert len(body["data"]) == MAX_INPUTS
    over = {"model": "mock/mock", "input": ["x"] * (MAX_INPUTS + 1)}
    status, body = await post(gateway, "/v1/embeddings", over)
    assert status == 400, body
    assert body["error"]["param"] == "input"
