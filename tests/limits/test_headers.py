"""Header limits, answered by the server the gateway really runs (GatewayRunner): a header
value or request target of `max_header_bytes` is served, one byte more is a 431 in the
OpenAI error shape (not a dropped connection or aiohttp's plain text)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import pytest

from tests.limits.served import Served
from tests.limits.served import served_gateway

LIMIT = 2048
CONFIG = f"""
store: {{url: "memory://"}}
server: {{limits: {{max_header_bytes: {LIMIT}}}}}
providers: [{{name: mock, kind: mock, mock: {{chunks: 2}}}}]
"""
CHAT = b'{"model": "mock/mock", "messages": [{"role": "user", "content": "hi"}]}'


@pytest.fixture
async def gateway() -> AsyncIterator[Served]:
    async with served_gateway(CONFIG) as served:
        yield served


async def exchange(served: Served, head: bytes, body: bytes = b"") -> tuple[int, bytes, bytes]:
    """Send one raw request; the status, the response head and body (the connection is
    closed after it)."""
    port = int(served.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head + body)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
        await writer.wait_closed()
    response_head, _, response_body = data.partition(b"\r\n\r\n")
    return int(response_head.split(b" ", 2)[1]), response_head, response_body


def chat_head(extra: bytes) -> bytes:
    return (
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: "
        + str(len(CHAT)).encode()
        + b"\r\n"
        + extra
        + b"\r\n"
    )


def assert_431(status: int, head: bytes, body: bytes) -> None:
    assert status == 431, (head, body)
    assert b"application/json" in head.lower()
    error = json.loads(body)["error"]
    assert error["code"] == "request_header_fields_too_large"
    assert error["type"] == "invalid_request_error"
    assert str(LIMIT) in error["message"]


async def test_header_value_at_limit_served_one_over_431(gateway: Served) -> None:
    at_limit = chat_head(b"X-Big: " + b"a" * LIMIT + b"\r\n")
    status, _, body = await exchange(gateway, at_limit, CHAT)
    assert status == 200, body
    assert json.loads(body)["object"] == "chat.completion"
    over = chat_head(b"X-Big: " + b"a" * (LIMIT + 1) + b"\r\n")
    assert_431(*await exchange(gateway, over, CHAT))


async def test_huge_authorization_header(gateway: Served) -> None:
    huge = chat_head(b"Authorization: Bearer " + b"k" * 100_000 + b"\r\n")
    assert_431(*await exchange(gateway, huge, CHAT))


async def test_request_target_at_limit_and_over(gateway: Served) -> None:
    def target(size: int) -> bytes:
        path = b"/healthz?" + b"q" * (size - len(b"/healthz?"))
        return b"GET " + path + b" HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n"

    status, _, body = await exchange(gateway, target(LIMIT))
    assert status == 200, body
    assert_431(*await exchange(gateway, target(LIMIT + 1)))


async def test_too_many_headers_is_a_json_400(gateway: Served) -> None:
    many = b"".join(b"X-H%d: v\r\n" % i for i in range(200))
    status, head, body = await exchange(gateway, chat_head(many), CHAT)
    assert status == 400, (head, body)
    assert json.loads(body)["error"]["code"] == "bad_http_request"


async def test_gateway_serves_after_refusals(gateway: Served) -> None:
    for _ in range(20):
        assert_431(*await exchange(gateway, chat_head(b"X-Big: " + b"a" * 5000 + b"\r\n"), CHAT))
    status, _, body = await exchange(gateway, chat_head(b""), CHAT)
    assert status == 200, body
