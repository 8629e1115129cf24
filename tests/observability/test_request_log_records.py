"""What the request log records of real requests through an in-process gateway (the sink is
the test's own list, put where the app's sink would be: the records, not the storage, are
under test here): every field of a streamed and a unary answer, each attempt of a failover,
the client's x-request-id kept apart from the gateway's id (a reused one makes two records),
errors with their message, admin calls not logged, secrets never in a record."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import openai
import pytest
from aiohttp.test_utils import TestServer

import gateway.app
from gateway.app import build_app
from gateway.config import parse_config
from gateway.observability.request_entry import RequestEntry
from tests.observability.test_request_log_queue import ListSink
from tests.upstreams.openai_upstream import FakeOpenAI

UPSTREAM_KEY = "sk-upstream-secret-0123456789"


@pytest.fixture
async def logged(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[TestServer, ListSink]]:
    sink = ListSink()
    monkeypatch.setattr(gateway.app, "make_sink", lambda config, url: sink)
    fake = FakeOpenAI().start()
    config = parse_config(
        f"""
store: {{url: "memory://"}}
auth: {{master_key: mk-test}}
request_log: {{flush_s: 0.05}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: {UPSTREAM_KEY}}}]}}
  - {{name: down, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k2, name: second}}]}}
models:
  - name: flaky
    targets:
      - {{provider: down, model: fail-500, priority: 0}}
      - {{provider: up, model: text, priority: 1}}
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        yield server, sink
    finally:
        await server.close()
        fake.stop()


async def records(sink: ListSink, n: int) -> list[RequestEntry]:
    for _ in range(100):
        if len(sink.rows) >= n:
            break
        await asyncio.sleep(0.02)
    return [sink.rows[i] for i in sink.order]


async def test_streamed_and_unary_answers_and_a_failover_are_recorded(
    logged: tuple[TestServer, ListSink],
) -> None:
    server, sink = logged
    base = str(server.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base, api_key="mk-test", max_retries=0) as client:
        stream = await client.chat.completions.create(
            model="up/text",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-request-id": "client-id-1"},
        )
        async for _ in stream:
            pass
        answer = await client.chat.completions.with_raw_response.create(
            model="flaky", messages=[{"role": "user", "content": "hi"}]
        )
        assert answer.headers["x-gateway-attempts"] == "3"  # a 500, its retry, the fallback
    streamed, failed_over = await records(sink, 2)
    assert streamed.client_request_id == "client-id-1"
    assert streamed.id != "client-id-1"
    assert streamed.route == "/v1/chat/completions"
    assert streamed.stream is True
    assert streamed.status == 200
    assert (streamed.model, streamed.provider, streamed.upstream_model) == ("up/text", "up", "text")
    assert streamed.finish_reason == "stop"
    assert streamed.input_tokens
    assert streamed.output_tokens
    assert streamed.ttft_s is not None
    assert streamed.duration_s >= streamed.ttft_s
    assert streamed.key_name == "master"
    assert [(a.provider, a.status, a.error) for a in streamed.attempts] == [("up", 200, None)]
    assert streamed.request_body is None  # bodies: off
    assert failed_over.client_request_id is None
    assert failed_over.id == answer.headers["x-request-id"]
    assert [(a.provider, a.key, a.status, a.error) for a in failed_over.attempts] == [
        ("down", "second", 500, "http_5xx"),
        ("down", "second", 500, "http_5xx"),  # routing.retries_per_target (default 1)
        ("up", "#0", 200, None),
    ]
    assert failed_over.stream is False
    assert failed_over.finish_reason == "stop"
    assert all(a.seconds >= 0 and a.started > 0 for a in failed_over.attempts)
    assert UPSTREAM_KEY not in str([*sink.rows.values()])


async def test_a_reused_client_id_makes_two_records_and_admin_calls_are_not_logged(
    logged: tuple[TestServer, ListSink],
) -> None:
    server, sink = logged
    headers = {"authorization": "Bearer mk-test", "x-request-id": "same"}
    body = {"model": "up/fail-400", "messages": [{"role": "user", "content": "hi"}]}
    async with aiohttp.ClientSession() as session:
        for _ in range(2):
            async with session.post(
                server.make_url("/v1/chat/completions"), json=body, headers=headers
            ) as answer:
                assert answer.status == 400
        async with session.get(server.make_url("/admin/health"), headers=headers) as answer:
            assert answer.status == 200
        async with session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": "up/text", "messages": [{"role": "user", "content": "x"}]},
            headers={"authorization": "Bearer wrong"},
        ) as answer:
            assert answer.status == 401
    first, second, refused = await records(sink, 3)
    await asyncio.sleep(0.1)
    assert len(sink.rows) == 3  # the admin call left none
    assert first.client_request_id == second.client_request_id == "same"
    assert first.id != second.id
    assert first.status == 400
    assert first.error
    assert first.error_message
    assert [(a.status, a.error) for a in first.attempts] == [(400, "http_4xx")]
    assert refused.status == 401
    assert refused.attempts == []
    assert refused.key_name is None
