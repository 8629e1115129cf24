"""A stream continued after content, as the request log records it: one record with every
attempt (the one that broke, with why; the one that finished the answer), the summed usage
and its cost, the answer's finish; charged, not lost."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import openai
import pytest
from aiohttp.test_utils import TestServer

import gateway.app
from gateway.app import build_app
from gateway.config import parse_config
from tests.observability.test_request_log_queue import ListSink
from tests.upstreams.continuing_upstream import ANSWER
from tests.upstreams.continuing_upstream import ContinuingUpstream


@pytest.fixture
async def logged(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[TestServer, ListSink]]:
    sink = ListSink()
    monkeypatch.setattr(gateway.app, "make_sink", lambda config, url: sink)
    fake = ContinuingUpstream().start()
    config = parse_config(
        f"""
store: {{url: "memory://"}}
request_log: {{flush_s: 0.05}}
routing: {{retries_per_target: 0}}
providers:
  - {{name: cut, kind: anthropic, base_url: "{fake.anthropic_url}", keys: [{{key: k1}}]}}
  - {{name: anth, kind: anthropic, base_url: "{fake.anthropic_url}", keys: [{{key: k2}}]}}
models:
  - name: m
    recovery: {{mode: continue}}
    price: {{input_per_mtok: 1.0, output_per_mtok: 1.0}}
    targets:
      - {{provider: cut, model: break-truncated-1400, priority: 0}}
      - {{provider: anth, model: answer, priority: 1}}
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


async def test_a_continued_stream_is_one_record_with_every_attempt(
    logged: tuple[TestServer, ListSink],
) -> None:
    server, sink = logged
    async with openai.AsyncOpenAI(
        base_url=str(server.make_url("/v1")), api_key="any", max_retries=0
    ) as client:
        stream = await client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "tell the story"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        text, usage = "", None
        async for chunk in stream:
            usage = chunk.usage or usage
            text += "".join(c.delta.content or "" for c in chunk.choices)
    assert text == ANSWER
    for _ in range(100):
        if sink.rows:
            break
        await asyncio.sleep(0.02)
    (record,) = sink.rows.values()
    assert [(a.provider, a.status, a.error) for a in record.attempts] == [
        ("cut", None, "protocol"),  # the stream ended without its end
        ("anth", 200, None),
    ]
    assert record.status == 200
    assert record.error is None
    assert record.finish_reason == "stop"
    assert (record.provider, record.upstream_model) == ("anth", "answer")
    assert usage is not None
    assert (record.input_tokens, record.output_tokens) == (
        usage.prompt_tokens,
        usage.completion_tokens,
    )
    assert record.cost_usd == pytest.approx((usage.prompt_tokens + usage.completion_tokens) / 1e6)
