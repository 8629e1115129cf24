"""Traces of real requests through an in-process gateway, exported over OTLP/HTTP to a
loopback receiver: the request span continues the client's trace, every upstream request
(streamed and unary chat, embeddings, count_tokens) carries a traceparent naming its
attempt's span, a failover makes two attempt spans, and a collector that answers 500, hangs
or is not there never fails a request."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from gateway.observability import tracing as tracing_module
from gateway.server.observers import OBSERVERS
from tests.observability.otlp_receiver import OTLPReceiver
from tests.observability.otlp_receiver import Received
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.embeddings_upstream import FakeEmbeddings
from tests.upstreams.openai_upstream import FakeOpenAI

CLIENT_TRACE = "0af7651916cd43dd8448eb211c80319c"
CLIENT_SPAN = "b7ad6b7169203331"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def upstreams() -> Iterator[tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings]]:
    fakes = FakeOpenAI().start(), FakeAnthropic().start(), FakeEmbeddings().start()
    yield fakes
    for fake in fakes:
        fake.stop()


def dead_endpoint() -> str:
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


async def gateway(
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
    endpoint: str,
    grace_s: float = 30.0,
    content: bool = False,
) -> TestServer:
    openai_fake, claude, embeddings = upstreams
    config = parse_config(
        f"""
store: {{url: "memory://"}}
server: {{shutdown_grace_s: {grace_s}}}
tracing: {{otlp_endpoint: "{endpoint}", service_name: gw-e2e, content: {str(content).lower()}}}
providers:
  - {{name: up, kind: openai, base_url: "{openai_fake.base_url}", keys: [{{key: k1}}]}}
  - {{name: down, kind: openai, base_url: "{openai_fake.base_url}", keys: [{{key: k2}}]}}
  - {{name: claude, kind: anthropic, base_url: "{claude.base_url}", keys: [{{key: sk-ant}}]}}
  - {{name: emb, kind: openai, base_url: "{embeddings.base_url}/v1", keys: [{{key: k3}}]}}
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
    return server


@pytest.fixture
async def traced(
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
) -> AsyncIterator[tuple[TestServer, OTLPReceiver]]:
    receiver = OTLPReceiver().start()
    server = await gateway(upstreams, receiver.base_url)
    try:
        yield server, receiver
    finally:
        await server.close()
        receiver.stop()


async def post(
    server: TestServer, path: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url(path), json=body, headers=headers or {}) as response,
    ):
        return response.status, await response.read()


async def flushed(server: TestServer) -> None:
    tracing = server.app[OBSERVERS].tracing  # type: ignore[index]
    assert tracing is not None
    assert await tracing.flush(5.0)


def traceparent(headers: dict[str, str]) -> tuple[str, str]:
    """The trace id and span id an upstream request carried."""
    value = {k.lower(): v for k, v in headers.items()}["traceparent"]
    _, trace_id, span_id, flags = value.split("-")
    assert int(flags, 16) & 1  # sampled
    return trace_id, span_id


def of_trace(spans: list[Received], trace_id: str) -> tuple[Received, list[Received]]:
    mine = [s for s in spans if s.trace_id == trace_id]
    (server,) = [s for s in mine if s.kind == "server"]
    return server, [s for s in mine if s.kind == "client"]


async def test_a_failover_continues_the_clients_trace_with_a_span_per_attempt(
    traced: tuple[TestServer, OTLPReceiver],
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
) -> None:
    server, receiver = traced
    openai_fake = upstreams[0]
    sent = len(openai_fake.requests)
    client = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
    body = {"model": "flaky", "messages": HI, "stream": True}
    status, _ = await post(server, "/v1/chat/completions", body, client)
    assert status == 200
    upstream_sent = [traceparent(r.headers) for r in openai_fake.requests[sent:]]
    assert len(upstream_sent) == 3  # a 500, its retry (routing.retries_per_target), the fallback
    await flushed(server)
    request_span, attempts = of_trace(receiver.wait_for(4), CLIENT_TRACE)
    assert request_span.parent_id == CLIENT_SPAN
    assert request_span.name == "chat flaky"
    assert request_span.resource["service.name"] == "gw-e2e"
    assert request_span.attributes["gen_ai.request.model"] == "flaky"
    assert request_span.attributes["gen_ai.response.model"] == "text"
    assert request_span.attributes["gen_ai.provider.name"] == "openai"
    assert request_span.attributes["gen_ai.response.finish_reasons"] == ["stop"]
    assert request_span.attributes["http.response.status_code"] == 200
    assert [a.name for a in attempts] == ["chat fail-500", "chat fail-500", "chat text"]
    assert all(a.parent_id == request_span.span_id for a in attempts)
    # each upstream request names its own attempt's span, in the client's trace
    assert upstream_sent == [(CLIENT_TRACE, a.span_id) for a in attempts]
    assert [a.attributes.get("error.type") for a in attempts] == ["http_5xx", "http_5xx", None]
    assert [a.attributes["http.response.status_code"] for a in attempts] == [500, 500, 200]


async def test_unary_chat_embeddings_and_count_tokens_carry_their_attempts_traceparent(
    traced: tuple[TestServer, OTLPReceiver],
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
) -> None:
    server, receiver = traced
    openai_fake, claude, embeddings = upstreams
    calls = [
        (openai_fake, "/v1/chat/completions", {"model": "up/text", "messages": HI}),
        (embeddings, "/v1/embeddings", {"model": "emb/e-small", "input": "hello"}),
        (claude, "/v1/messages/count_tokens", {"model": "claude/c", "messages": HI}),
    ]
    carried = []
    for fake, path, body in calls:
        sent = len(fake.requests)
        status, answer = await post(server, path, body)
        assert status == 200, answer
        (request,) = fake.requests[sent:]
        carried.append(traceparent(request.headers))
    await flushed(server)
    spans = receiver.wait_for(6)
    operations = []
    for trace_id, span_id in carried:
        request_span, (attempt,) = of_trace(spans, trace_id)
        assert attempt.span_id == span_id
        assert attempt.parent_id == request_span.span_id
        assert request_span.parent_id is None  # no client traceparent: a trace of its own
        operations.append(request_span.attributes["gen_ai.operation.name"])
    assert operations == ["chat", "embeddings", "count_tokens"]


@pytest.mark.parametrize("mode", ["fail", "hang", "dead"])
async def test_a_broken_collector_never_fails_a_request(
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
    mode: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(tracing_module, "EXPORT_TIMEOUT_S", 1.0)
    receiver = None if mode == "dead" else OTLPReceiver(mode).start()
    endpoint = dead_endpoint() if receiver is None else receiver.base_url
    server = await gateway(upstreams, endpoint, grace_s=1.5)
    try:
        chat = {"model": "flaky", "messages": HI}
        for _ in range(3):
            status, _ = await post(server, "/v1/chat/completions", chat)
            assert status == 200
        tracing = server.app[OBSERVERS].tracing  # type: ignore[index]
        # the export fails (or hangs) in its own task while requests go on
        exporting = asyncio.ensure_future(tracing.flush(5.0))
        streamed = {"model": "up/text", "messages": HI, "stream": True}
        answers = await asyncio.gather(
            *(post(server, "/v1/chat/completions", streamed) for _ in range(5))
        )
        assert [status for status, _ in answers] == [200] * 5
        await exporting
        if receiver is not None:
            assert receiver.posts >= 1
            assert receiver.spans == []
    finally:
        began = time.monotonic()
        await server.close()  # its cleanup shuts tracing down, within the grace period
        assert time.monotonic() - began < 3.0
        if receiver is not None:
            receiver.stop()


async def test_with_tracing_off_no_trace_is_made_and_no_traceparent_sent(
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
) -> None:
    openai_fake = upstreams[0]
    config = parse_config(
        f"""
store: {{url: "memory://"}}
providers:
  - {{name: up, kind: openai, base_url: "{openai_fake.base_url}", keys: [{{key: k1}}]}}
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        assert OBSERVERS not in server.app  # the middleware runs without observers
        sent = len(openai_fake.requests)
        client = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}
        status, _ = await post(
            server, "/v1/chat/completions", {"model": "up/text", "messages": HI}, client
        )
        assert status == 200
        (request,) = openai_fake.requests[sent:]
        assert "traceparent" not in {k.lower() for k in request.headers}
    finally:
        await server.close()


async def test_content_reaches_the_span_only_when_asked_and_without_secrets(
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
) -> None:
    receiver = OTLPReceiver().start()
    try:
        for content in (False, True):
            server = await gateway(upstreams, receiver.base_url, content=content)
            try:
                trace_id = f"{int(content) + 1:032x}"
                client = {"traceparent": f"00-{trace_id}-{CLIENT_SPAN}-01"}
                ask = [{"role": "user", "content": "what is the secret k1 here"}]
                for stream in (True, False):
                    body = {"model": "up/text", "messages": ask, "stream": stream}
                    status, _ = await post(server, "/v1/chat/completions", body, client)
                    assert status == 200
                await flushed(server)
                spans: list[Received] = []
                for _ in range(100):
                    spans = [
                        s for s in receiver.spans if s.trace_id == trace_id and s.kind == "server"
                    ]
                    if len(spans) == 2:
                        break
                    await asyncio.sleep(0.05)
                assert len(spans) == 2
                for span in spans:
                    events = dict(span.events)
                    if not content:
                        assert events == {}
                        continue
                    prompt = events["gen_ai.content.prompt"]["gen_ai.prompt"]
                    completion = events["gen_ai.content.completion"]["gen_ai.completion"]
                    assert "what is the secret [redacted] here" in prompt  # the key k1 is cut
                    assert completion
            finally:
                await server.close()
    finally:
        receiver.stop()


async def test_openai_python_gets_the_same_answers_with_tracing_on(
    upstreams: tuple[FakeOpenAI, FakeAnthropic, FakeEmbeddings],
    traced: tuple[TestServer, OTLPReceiver],
) -> None:
    """What a real client assembles, unary and streamed, through a failover, is what it
    assembles through a gateway without tracing; every upstream request of it carried its
    own attempt's traceparent in the client's trace (the request head is reused per key,
    the traceparent is each request's own)."""
    import openai

    server, receiver = traced
    openai_fake = upstreams[0]
    plain_config = parse_config(
        f"""
store: {{url: "memory://"}}
providers:
  - {{name: up, kind: openai, base_url: "{openai_fake.base_url}", keys: [{{key: k1}}]}}
""",
        env={},
    )
    plain = TestServer(build_app(plain_config), host="127.0.0.1")
    await plain.start_server()
    client_parent = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}

    async def answers(base: TestServer, model: str) -> tuple[str | None, str]:
        async with openai.AsyncOpenAI(
            base_url=str(base.make_url("/v1")), api_key="none", max_retries=0
        ) as client:
            unary = await client.chat.completions.create(
                model=model,
                messages=HI,
                extra_headers=client_parent,  # type: ignore[arg-type]
            )
            stream = await client.chat.completions.create(
                model=model,
                messages=HI,  # type: ignore[arg-type]
                stream=True,
                extra_headers=client_parent,
            )
            text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        return unary.choices[0].message.content, text

    try:
        sent = len(openai_fake.requests)
        got = await answers(server, "flaky")
        upstream_parents = [traceparent(r.headers) for r in openai_fake.requests[sent:]]
        want = await answers(plain, "up/text")
    finally:
        await plain.close()
    assert got == want
    assert got[0]
    assert len(upstream_parents) == 6  # each request: the 500, its retry, the fallback
    assert {trace for trace, _ in upstream_parents} == {CLIENT_TRACE}
    assert len({span for _, span in upstream_parents}) == 6
    await flushed(server)
    attempts = {s.span_id for s in receiver.spans if s.kind == "client"}
    assert {span for _, span in upstream_parents} <= attempts
