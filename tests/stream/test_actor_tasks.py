"""In-process: a client that leaves mid-stream leaves no task and no upstream connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.server.state import STATE
from tests.inprocess import inprocess_gateway
from tests.upstreams.openai_upstream import FakeOpenAI


@pytest.fixture
async def served() -> AsyncIterator[tuple[TestServer, FakeOpenAI]]:
    async with inprocess_gateway() as pair:
        yield pair


async def test_disconnect_cancels_upstream_and_leaves_no_task(
    served: tuple[TestServer, FakeOpenAI],
) -> None:
    server, fake = served
    state = server.app[STATE]  # type: ignore[index]
    baseline = asyncio.all_tasks()
    async with aiohttp.ClientSession() as session:
        response = await session.post(
            server.make_url("/v1/chat/completions"),
            json={
                "model": "up/slow",
                "messages": [{"role": "user", "content": "hi"}],
                "stream": True,
            },
        )
        assert response.status == 200
        assert (await response.content.readline()).startswith(b"data: ")
        assert len(state.active) == 1
        fake.disconnected.clear()
        response.close()  # the client goes away mid-stream
        took = await asyncio.to_thread(fake.wait_disconnect, 1.0)
        assert took is not None, "upstream still connected a second after the client left"
    for _ in range(100):
        if not state.active and asyncio.all_tasks() <= baseline:
            break
        await asyncio.sleep(0.01)
    assert not state.active
    leftover = asyncio.all_tasks() - baseline
    assert not leftover, leftover
