"""In-process: count_tokens and embeddings go through the attempt runner like chat does:
their failures reach key health, and their deadlines run on the shared alarm clock (with
their named timeout codes, and no deadline left behind)."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from gateway.routing.health import REFUSED
from gateway.routing.health import KeyHealth
from gateway.server.state import STATE
from gateway.server.state import GatewayState
from gateway.upstream.alarm import AlarmClock
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.embeddings_upstream import FakeEmbeddings

TIMEOUTS = "{connect_s: 1, first_byte_s: 5, idle_s: 5, total_s: 0.3}"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[FakeAnthropic, FakeEmbeddings]]:
    claude, embeddings = FakeAnthropic().start(), FakeEmbeddings().start()
    yield claude, embeddings
    claude.stop()
    embeddings.stop()


@pytest.fixture
async def served(upstreams: tuple[FakeAnthropic, FakeEmbeddings]) -> AsyncIterator[TestServer]:
    claude, embeddings = upstreams
    config = parse_config(
        f"""
store: {{url: "memory://"}}
routing: {{circuit_failures: 2, cooldown_s: 60, retries_per_target: 0}}
providers:
  - {{name: claude, kind: anthropic, base_url: "{claude.base_url}", keys: [{{key: sk-ant-paths}}],
      timeouts: {TIMEOUTS}}}
  - {{name: oa, kind: openai, base_url: "{embeddings.base_url}/v1", keys: [{{key: sk-oa-paths}}],
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


def state_of(server: TestServer) -> GatewayState:
    return server.app[STATE]  # type: ignore[index]


def health_of(server: TestServer, model: str) -> KeyHealth:
    (attempt,) = state_of(server).router.plan(model)
    return attempt.health


async def post(server: TestServer, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url(path), json=body) as response,
    ):
        return response.status, json.loads(await response.read())


async def count(server: TestServer, model: str) -> tuple[int, dict[str, Any]]:
    return await post(server, "/v1/messages/count_tokens", {"model": model, "messages": HI})


async def test_a_rate_limited_count_cools_the_key_down(
    served: TestServer, upstreams: tuple[FakeAnthropic, FakeEmbeddings]
) -> None:
    claude = upstreams[0]
    health = health_of(served, "claude/fail-429")
    status, _ = await count(served, "claude/fail-429")
    assert status == 429
    assert health.begin(time.monotonic(), "fail-429") == REFUSED  # resting for that model
    sent = len(claude.requests)
    status, body = await count(served, "claude/fail-429")
    assert status == 429, body  # refused by the gateway: the key is still resting
    assert len(claude.requests) == sent


async def test_count_5xx_answers_open_the_key_circuit(
    served: TestServer, upstreams: tuple[FakeAnthropic, FakeEmbeddings]
) -> None:
    claude = upstreams[0]
    for _ in range(2):  # routing.circuit_failures
        status, _ = await count(served, "claude/fail-500")
        assert status == 502
    sent = len(claude.requests)
    status, body = await count(served, "claude/fail-500")
    assert status == 503, body
    assert len(claude.requests) == sent  # the open circuit kept the request away


async def test_a_count_timeout_is_a_504_on_the_alarm_clock_and_counts_to_the_circuit(
    served: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    arms = spy_on_arms(monkeypatch)
    status, body = await count(served, "claude/slow")
    assert status == 504, body
    error = body["error"]
    assert (error["type"], error["message"]) == (
        "timeout_error",
        "count_tokens took over the provider's total_s",
    )
    assert arms  # the deadline was an alarm on the pool's clock ...
    assert len(state_of(served).pool.clock) == 0  # ... and it is gone with its request
    assert health_of(served, "claude/slow").failures == 1


async def test_an_embeddings_timeout_fires_on_the_alarm_clock(
    served: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    arms = spy_on_arms(monkeypatch)
    status, body = await post(served, "/v1/embeddings", {"model": "oa/slow", "input": "a"})
    assert status == 504, body
    error = body["error"]
    assert (error["type"], error["code"], error["message"]) == (
        "timeout_error",
        "upstream_timeout",
        "the upstream did not answer within 0.3s",
    )
    assert arms
    assert len(state_of(served).pool.clock) == 0
    assert health_of(served, "oa/slow").failures == 1


async def test_answered_counts_and_embeddings_leave_no_deadline_behind(
    served: TestServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    arms = spy_on_arms(monkeypatch)
    status, body = await count(served, "claude/text")
    assert (status, set(body)) == (200, {"input_tokens"})
    status, body = await post(
        served, "/v1/embeddings", {"model": "oa/text-embedding-3-small", "input": ["a", "b"]}
    )
    assert status == 200, body
    assert arms  # each request had its deadline on the clock
    assert len(state_of(served).pool.clock) == 0


def spy_on_arms(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The deadlines put on every AlarmClock from now on."""
    arms: list[float] = []
    add = AlarmClock._add

    def counted(self: AlarmClock, when: float, alarm: Any) -> int:
        arms.append(when)
        return add(self, when, alarm)

    monkeypatch.setattr(AlarmClock, "_add", counted)
    return arms
