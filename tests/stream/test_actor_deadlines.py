"""In-process: the actor's timeouts (one Alarm per wait, on the pool's AlarmClock) keep their
error codes, and no deadline outlives its request."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from gateway.server.state import STATE
from tests.upstreams.openai_upstream import FakeOpenAI

TIMEOUTS = "{connect_s: 1, first_byte_s: 0.2, idle_s: 5, total_s: 0.3}"


@pytest.fixture
async def served() -> AsyncIterator[TestServer]:
    fake = FakeOpenAI().start()
    config = parse_config(
        f"""
store: {{url: "memory://"}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k}}],
      timeouts: {TIMEOUTS}}}
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()
        fake.stop()


async def _post(server: TestServer, model: str, stream: bool) -> tuple[int, bytes]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/v1/chat/completions"), json=body) as response,
    ):
        return response.status, await response.read()


@pytest.mark.parametrize(
    ("stream", "code", "message"),
    [
        (False, "upstream_timeout", "the upstream did not answer within 0.3s"),
        (True, "first_byte_timeout", "no byte from the upstream within 0.2s"),
    ],
)
async def test_a_silent_upstream_times_out_with_the_phase_code(
    served: TestServer, stream: bool, code: str, message: str
) -> None:
    status, data = await _post(served, "up/silent", stream)
    assert status == 504, data
    error = json.loads(data)["error"]
    assert (error["code"], error["message"]) == (code, message)
    clock = served.app[STATE].pool.clock  # type: ignore[index]
    assert len(clock) == 0


@pytest.mark.parametrize("stream", [False, True])
async def test_answers_leave_no_deadline_behind(served: TestServer, stream: bool) -> None:
    for _ in range(3):
        status, data = await _post(served, "up/text", stream)
        assert status == 200, data
    clock = served.app[STATE].pool.clock  # type: ignore[index]
    assert len(clock) == 0
