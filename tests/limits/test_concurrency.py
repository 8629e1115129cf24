"""Concurrent requests against `max_concurrent_streams` and `max_concurrent_streams_per_key`:
exactly the overflow is refused (503 or 429, with Retry-After), the rest are served whole,
and the gateway stays healthy and serves again once the slots free."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from gateway.server.limits import SLOTS
from tests.limits.served import Served
from tests.limits.served import served_with_session

TOTAL = 20
PER_KEY = 3
CONFIG = f"""
store: {{url: "memory://"}}
auth: {{master_key: sk-master}}
server:
  limits: {{max_concurrent_streams: {TOTAL}, max_concurrent_streams_per_key: {PER_KEY}}}
providers:
  - {{name: mock, kind: mock, mock: {{chunks: 10, delay_s: 0.1}}}}
  - {{name: quick, kind: mock, mock: {{chunks: 5, delay_s: 0.08}}}}
keys:
  - {{name: team-a, key: sk-team-a}}
  - {{name: team-b, key: sk-team-b}}
"""
STREAM = {
    "model": "mock/mock",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
}


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[Served, aiohttp.ClientSession]]:
    async with served_with_session(CONFIG) as pair:
        yield pair


async def stream(
    pair: tuple[Served, aiohttp.ClientSession],
    key: str,
    started: asyncio.Event | None = None,
    model: str = "quick/mock",
) -> tuple[int, dict[str, str], bytes]:
    """One streamed request (`quick/mock`: ~0.4 s; `mock/mock`: ~1 s)."""
    served, session = pair
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(
        served.url + "/v1/chat/completions", json={**STREAM, "model": model}, headers=headers
    ) as response:
        if started is not None and response.status == 200:
            started.set()
        return response.status, dict(response.headers), await response.read()


def assert_whole_stream(body: bytes) -> None:
    assert body.rstrip().endswith(b"data: [DONE]"), body[-200:]


async def test_overflow_gets_503_with_retry_after(
    gateway: tuple[Served, aiohttp.ClientSession],
) -> None:
    served, session = gateway
    # 120 clients at once: exactly TOTAL hold a slot for the stream's ~1 s, the rest are
    # refused at once
    results = await asyncio.gather(
        *(stream(gateway, "sk-master", model="mock/mock") for _ in range(120))
    )
    served_ok = [r for r in results if r[0] == 200]
    refused = [r for r in results if r[0] != 200]
    assert len(served_ok) == TOTAL
    assert len(refused) == 120 - TOTAL
    for status, headers, body in refused:
        assert status == 503
        assert headers["Retry-After"] == "1"
        error = json.loads(body)["error"]
        assert error["code"] == "too_many_streams"
        assert error["type"] == "server_error"
    for _, _, body in served_ok:
        assert_whole_stream(body)
    slots = served.app[SLOTS]
    assert slots.total == 0
    assert not slots.by_key
    async with session.get(served.url + "/healthz") as health:
        assert health.status == 200
    status, _, body = await stream(gateway, "sk-master")
    assert status == 200
    assert_whole_stream(body)


async def test_per_key_limit_is_429_and_leaves_other_keys(
    gateway: tuple[Served, aiohttp.ClientSession],
) -> None:
    served, _ = gateway
    a = [asyncio.create_task(stream(gateway, "sk-team-a")) for _ in range(PER_KEY + 2)]
    b = [asyncio.create_task(stream(gateway, "sk-team-b")) for _ in range(PER_KEY)]
    master = [asyncio.create_task(stream(gateway, "sk-master")) for _ in range(PER_KEY + 2)]
    results_a = await asyncio.gather(*a)
    results_b = await asyncio.gather(*b)
    results_master = await asyncio.gather(*master)
    statuses_a = sorted(r[0] for r in results_a)
    assert statuses_a == [200] * PER_KEY + [429] * 2
    for status, headers, body in results_a:
        if status == 429:
            assert headers["Retry-After"] == "1"
            error = json.loads(body)["error"]
            assert error["code"] == "too_many_streams_for_key"
            assert error["type"] == "rate_limit_error"
        else:
            assert_whole_stream(body)
    # another key has its own limit; the master key only the total
    assert [r[0] for r in results_b] == [200] * PER_KEY
    assert [r[0] for r in results_master] == [200] * (PER_KEY + 2)
    slots = served.app[SLOTS]
    assert slots.total == 0
    assert not slots.by_key
    status, _, body = await stream(gateway, "sk-team-a")
    assert status == 200


async def test_a_slot_is_freed_by_every_ending(
    gateway: tuple[Served, aiohttp.ClientSession],
) -> None:
    """Refused keys, unknown models and clients that leave mid-stream all give their slot
    back: afterwards a full set of TOTAL streams is served again."""
    served, session = gateway
    headers = {"Authorization": "Bearer sk-unknown"}
    bad: dict[str, Any] = {**STREAM, "model": "nope"}
    for body, auth in [(STREAM, headers), (bad, {"Authorization": "Bearer sk-master"})]:
        async with session.post(
            served.url + "/v1/chat/completions", json=body, headers=auth
        ) as response:
            assert response.status in (401, 404)
    started = asyncio.Event()
    leaving = asyncio.create_task(stream(gateway, "sk-team-a", started))
    await started.wait()
    leaving.cancel()  # the client goes away mid-stream
    with pytest.raises(asyncio.CancelledError):
        await leaving
    slots = served.app[SLOTS]
    for _ in range(200):
        if slots.total == 0:
            break
        await asyncio.sleep(0.01)
    assert slots.total == 0
    assert not slots.by_key
    results = await asyncio.gather(*(stream(gateway, "sk-master") for _ in range(TOTAL)))
    assert [r[0] for r in results] == [200] * TOTAL
