"""Traces of one request (gateway/observability/tracing.py), exported over real OTLP/HTTP to
a loopback receiver that decodes the protobuf: the server span continues a client's
traceparent, an attempt's client span is its child and the traceparent it returns names that
span, the GenAI attributes, sampling (ratio 0: nothing exported, the traceparent still sent
with sampled=0; a sampled client wins), content only with `content: true`, and a failing or
hung collector neither reaches the request nor holds shutdown past its bound."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.config_observe import TracingConfig
from gateway.observability import tracing as tracing_module
from gateway.observability.export_logs import _OncePerInterval
from gateway.observability.request_trace import RequestTrace
from gateway.observability.tracing import Tracing
from tests.observability.otlp_receiver import OTLPReceiver
from tests.observability.otlp_receiver import Received

CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


@dataclass
class FakeAttempt:  # what a RequestTrace reads of an Attempt: a real provider config
    provider: Any
    model: str


def providers() -> dict[str, Any]:
    config = parse_config(
        """
store: {url: "memory://"}
providers:
  - name: up
    kind: openai
    base_url: "https://user:pw@api.example.com:8443/v1?key=sk-secret"
    keys: [{key: k}]
  - {name: claude, kind: anthropic, keys: [{key: k}]}
""",
        env={},
    )
    return {p.name: p for p in config.providers}


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver().start()
    yield r
    r.stop()


def tracing_to(receiver: OTLPReceiver, **options: Any) -> Tracing:
    return Tracing.from_config(TracingConfig(otlp_endpoint=receiver.base_url, **options), {})


def one_failover(trace: RequestTrace) -> tuple[str | None, str | None]:
    p = providers()
    first = trace.attempt_started(FakeAttempt(p["up"], "gpt-x"))  # type: ignore[arg-type]
    trace.attempt_ended(500, "http_5xx")
    second = trace.attempt_started(FakeAttempt(p["claude"], "claude-y"))  # type: ignore[arg-type]
    trace.attempt_ended(200, None)
    trace.finish(
        status=200,
        model="smart",
        provider="claude",
        response_model="claude-y-2025",
        input_tokens=12,
        output_tokens=34,
        finish_reason="stop",
        error=None,
        operation="chat",
    )
    return first, second


def parse(traceparent: str | None) -> tuple[str, str, bool]:
    """Its trace id, span id and sampled flag (the SDK may set Level 2's random flag too)."""
    assert traceparent is not None
    version, trace_id, span_id, flags = traceparent.split("-")
    assert version == "00"
    assert len(trace_id) == 32
    assert len(span_id) == 16
    assert len(flags) == 2
    return trace_id, span_id, bool(int(flags, 16) & 1)


def by_kind(spans: list[Received]) -> tuple[Received, list[Received]]:
    (server,) = [s for s in spans if s.kind == "server"]
    return server, [s for s in spans if s.kind == "client"]


async def test_a_request_span_continues_the_clients_trace_with_a_child_per_attempt(
    receiver: OTLPReceiver,
) -> None:
    tracing = tracing_to(receiver, service_name="gw-test")
    headers = {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01", "tracestate": "vendor=1"}
    trace = tracing.start_request(headers, "/v1/chat/completions", "POST")
    first, second = one_failover(trace)
    assert await tracing.shutdown(5.0)
    server, clients = by_kind(receiver.wait_for(3))
    assert server.trace_id == CLIENT_TRACE
    assert server.parent_id == CLIENT_SPAN
    assert server.trace_state == "vendor=1"
    assert server.name == "chat smart"
    assert server.resource["service.name"] == "gw-test"
    assert server.attributes == {
        "http.request.method": "POST",
        "http.route": "/v1/chat/completions",
        "gen_ai.operation.name": "chat",
        "http.response.status_code": 200,
        "gen_ai.request.model": "smart",
        "gen_ai.response.model": "claude-y-2025",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 34,
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.provider.name": "anthropic",
        "gateway.provider": "claude",
    }
    assert [c.name for c in clients] == ["chat gpt-x", "chat claude-y"]
    for client, sent in zip(clients, (first, second), strict=True):
        assert client.trace_id == CLIENT_TRACE
        assert client.parent_id == server.span_id
        assert parse(sent) == (CLIENT_TRACE, client.span_id, True)  # the attempt's own span
    failed, answered = clients
    assert failed.attributes["http.response.status_code"] == 500
    assert failed.attributes["error.type"] == "http_5xx"
    assert failed.status_code == 2  # STATUS_CODE_ERROR
    assert failed.attributes["url.full"] == "https://api.example.com:8443/v1"  # no key, no user
    assert failed.attributes["server.address"] == "api.example.com"
    assert failed.attributes["server.port"] == 8443
    assert failed.attributes["http.request.method"] == "POST"
    assert failed.attributes["gen_ai.provider.name"] == "openai"
    assert answered.attributes["url.full"] == "https://api.anthropic.com"
    assert answered.attributes["server.port"] == 443
    assert "error.type" not in answered.attributes
    assert answered.status_code == 0


async def test_without_a_client_traceparent_a_new_trace_begins_and_errors_mark_the_span(
    receiver: OTLPReceiver,
) -> None:
    tracing = tracing_to(receiver)
    trace = tracing.start_request({"traceparent": "garbage"}, "/v1/embeddings", "POST")
    sent = trace.attempt_started(FakeAttempt(providers()["up"], "emb"))  # type: ignore[arg-type]
    # the request ends without the attempt told of its end (the client left): it is ended
    trace.finish(
        status=502,
        model=None,
        provider=None,
        response_model=None,
        input_tokens=None,
        output_tokens=None,
        finish_reason=None,
        error="upstream_error",
        operation="embeddings",
    )
    assert await tracing.shutdown(5.0)
    server, (client,) = by_kind(receiver.wait_for(2))
    assert server.parent_id is None
    assert server.trace_id != CLIENT_TRACE
    assert server.name == "POST /v1/embeddings"  # no model known
    assert server.attributes["error.type"] == "upstream_error"
    assert server.attributes["http.response.status_code"] == 502
    assert server.status_code == 2
    assert client.name == "embeddings emb"
    assert client.attributes["error.type"] == "upstream_error"
    assert parse(sent)[:2] == (server.trace_id, client.span_id)


async def test_ratio_zero_exports_nothing_but_still_propagates_unsampled(
    receiver: OTLPReceiver,
) -> None:
    tracing = tracing_to(receiver, sample_ratio=0.0, content=True)
    trace = tracing.start_request({}, "/v1/chat/completions", "POST")
    assert not trace.wants_content
    first, second = one_failover(trace)
    a, b = parse(first), parse(second)
    assert a[2] is b[2] is False
    assert a[0] == b[0]
    assert a[1] != b[1]
    # a client's sampled flag wins over the ratio (parent-based)
    sampled = tracing.start_request(
        {"traceparent": f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"}, "/v1/chat/completions", "POST"
    )
    one_failover(sampled)
    assert await tracing.shutdown(5.0)
    spans = receiver.wait_for(3)
    await asyncio.sleep(0.2)
    assert {s.trace_id for s in receiver.spans} == {CLIENT_TRACE}
    assert len(spans) == len(receiver.spans) == 3


@pytest.mark.parametrize("content", [False, True])
async def test_prompt_and_completion_text_only_with_content(
    receiver: OTLPReceiver, content: bool
) -> None:
    tracing = tracing_to(receiver, content=content)
    trace = tracing.start_request({}, "/v1/chat/completions", "POST")
    assert trace.wants_content is content
    trace.prompt("the secret prompt")
    one_failover(trace)
    trace.completion("the secret completion")  # after finish: no longer recorded
    trace2 = tracing.start_request({}, "/v1/chat/completions", "POST")
    trace2.completion("an answer")
    trace2.finish(
        status=200,
        model="m",
        provider=None,
        response_model=None,
        input_tokens=None,
        output_tokens=None,
        finish_reason=None,
        error=None,
        operation="chat",
    )
    assert await tracing.shutdown(5.0)
    spans = receiver.wait_for(4)
    events = [e for s in spans for e in s.events]
    if content:
        assert events == [
            ("gen_ai.content.prompt", {"gen_ai.prompt": "the secret prompt"}),
            ("gen_ai.content.completion", {"gen_ai.completion": "an answer"}),
        ]
    else:
        assert events == []
        assert "secret" not in repr([(s.attributes, s.events) for s in spans])


@pytest.mark.parametrize("mode", ["fail", "hang"])
async def test_a_failing_collector_never_reaches_the_request_and_shutdown_is_bounded(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tracing_module, "EXPORT_TIMEOUT_S", 0.5)
    receiver = OTLPReceiver(mode).start()
    try:
        tracing = tracing_to(receiver)
        for _ in range(3):
            one_failover(tracing.start_request({}, "/v1/chat/completions", "POST"))
        began = time.monotonic()
        await tracing.flush(5.0)  # the export fails, or gives up on the hung collector
        assert time.monotonic() - began < 2.0
        assert receiver.posts >= 1
        for _ in range(3):  # the next requests are traced as if nothing happened
            one_failover(tracing.start_request({}, "/v1/chat/completions", "POST"))
        receiver.mode = "hang"
        began = time.monotonic()
        assert not await tracing.shutdown(0.3)  # the hung export cancelled, not waited for
        assert time.monotonic() - began < 1.0
        assert receiver.spans == []
    finally:
        receiver.stop()


def test_export_failures_are_logged_at_most_once_an_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logger = logging.getLogger("tests.tracing.quiet")
    quiet = _OncePerInterval(0.2)
    logger.addFilter(quiet)
    try:
        with caplog.at_level(logging.WARNING, logger=logger.name):
            for _ in range(5):
                logger.error("Failed to export span batch")
            time.sleep(0.25)
            logger.error("Failed to export span batch")
    finally:
        logger.removeFilter(quiet)
    messages = [r.getMessage() for r in caplog.records if r.name == logger.name]
    assert messages == [
        "Failed to export span batch",
        "Failed to export span batch (4 more such messages in the last 0.2s)",
    ]


async def test_the_sdks_export_loggers_are_quieted() -> None:
    tracing = Tracing.from_config(TracingConfig(otlp_endpoint="http://127.0.0.1:9"), {})
    try:
        for name in (
            "opentelemetry.exporter.otlp.proto.http.trace_exporter",
            "opentelemetry.sdk._shared_internal",
        ):
            filters = logging.getLogger(name).filters
            assert sum(isinstance(f, _OncePerInterval) for f in filters) == 1
    finally:
        await tracing.shutdown(1.0)
