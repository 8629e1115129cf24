"""No blocking call on the event loop: requests through an in-process gateway under blockbuster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from blockbuster import blockbuster_ctx

from tests.inprocess import inprocess_gateway

TOOLS = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    async with inprocess_gateway("{chunks: 4, delay_s: 0.01}") as (test_server, _):
        yield test_server


@pytest.mark.parametrize("stream", [False, True])
async def test_requests_never_block_the_loop(server: TestServer, stream: bool) -> None:
    async with aiohttp.ClientSession() as session:
        with blockbuster_ctx(scanned_modules=["gateway"]):
            for model, tools in [
                ("up/text", None),
                ("up/interleaved-3", TOOLS),
                ("mock/mock", TOOLS),
                ("up/fail-500", None),
                ("up/error-after", None),
                ("nope", None),
            ]:
                body: dict[str, object] = {
                    "model": model,
                    "messages": [{"role": "user", "content": "hi"}],
                    "stream": stream,
                }
                if tools:
                    body["tools"] = tools
                async with session.post(
                    server.make_url("/v1/chat/completions"), json=body
                ) as response:
                    await response.read()
                    assert response.status in (200, 404, 502)
