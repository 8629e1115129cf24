"""The gateway's OTLP/HTTP export from the event loop (gateway/observability/otlp_exporter.py,
span_processor.py) against a loopback receiver that decodes the protobuf: the
OTEL_EXPORTER_OTLP_* settings it keeps (headers, compression), retries of what a collector
says is transient (and only those), the export bound, the batch processor's OTEL_BSP_*
settings (batch size, schedule, queue bound with drops counted), and no thread of its own."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.config_observe import TracingConfig
from gateway.observability import otlp_exporter
from gateway.observability.otlp_exporter import OTLPHttpExporter
from gateway.observability.tracing import Tracing
from tests.observability.otlp_receiver import OTLPReceiver
from tests.observability.test_tracing import one_failover


@pytest.fixture
def receiver() -> Iterator[OTLPReceiver]:
    r = OTLPReceiver().start()
    yield r
    r.stop()


def traced(receiver: OTLPReceiver, env: dict[str, str], requests: int = 1) -> Tracing:
    """A Tracing to `receiver` with `env` as its environment, and `requests` traced requests
    (three spans each: a request span, a failed attempt and the answering one)."""
    tracing = Tracing.from_config(TracingConfig(otlp_endpoint=receiver.base_url), env)
    for _ in range(requests):
        one_failover(tracing.start_request({}, "/v1/chat/completions", "POST"))
    return tracing


@pytest.mark.parametrize("compression", ["gzip", "deflate", "none"])
async def test_the_collectors_headers_and_compression_come_from_the_environment(
    receiver: OTLPReceiver, compression: str
) -> None:
    env = {
        "OTEL_EXPORTER_OTLP_HEADERS": "x-general=1,x-tenant=general",
        # the signal's own setting wins over the general one; values are URL-decoded
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "authorization=Bearer%20tok-1,x-tenant=traces",
        "OTEL_EXPORTER_OTLP_COMPRESSION": compression,
    }
    tracing = traced(receiver, env)
    assert await tracing.shutdown(5.0)
    assert len(receiver.wait_for(3)) == 3
    (headers,) = receiver.headers
    assert headers["authorization"] == "Bearer tok-1"
    assert headers["x-tenant"] == "traces"
    assert "x-general" not in headers
    assert headers["content-type"] == "application/x-protobuf"
    assert headers.get("content-encoding", "none") == compression
    ((sent, decoded),) = receiver.sizes
    assert sent is not None
    assert sent < decoded if compression != "none" else sent == decoded


def test_an_unknown_compression_is_refused_when_tracing_starts() -> None:
    with pytest.raises(ValueError, match="OTEL_EXPORTER_OTLP_COMPRESSION"):
        OTLPHttpExporter(
            "http://127.0.0.1:9/v1/traces", {"OTEL_EXPORTER_OTLP_COMPRESSION": "lz4"}, 1
        )


@pytest.mark.parametrize(
    ("answers", "posts"),
    [
        ([(503, "0"), (429, "0")], 3),  # transient, with Retry-After: taken, then sent
        ([(502, None)], 2),  # transient, no Retry-After: after the backoff
    ],
)
async def test_a_transient_answer_is_retried_and_the_batch_sent_once(
    receiver: OTLPReceiver,
    monkeypatch: pytest.MonkeyPatch,
    answers: list[tuple[int, str | None]],
    posts: int,
) -> None:
    monkeypatch.setattr(otlp_exporter, "FIRST_BACKOFF_S", 0.05)
    receiver.answers = list(answers)
    tracing = traced(receiver, {})
    assert await tracing.shutdown(5.0)
    assert receiver.posts == posts
    assert len(receiver.spans) == 3  # sent once, taken once


async def test_a_refusal_is_not_retried_and_the_next_batch_still_goes(
    receiver: OTLPReceiver,
) -> None:
    receiver.answers = [(400, None)]
    tracing = traced(receiver, {})
    assert await tracing.flush(5.0)
    assert receiver.posts == 1
    assert receiver.spans == []
    assert isinstance(tracing.processor.exporter, OTLPHttpExporter)
    assert tracing.processor.exporter.failures == 1
    one_failover(tracing.start_request({}, "/v1/chat/completions", "POST"))
    assert await tracing.shutdown(5.0)
    assert receiver.posts == 2
    assert len(receiver.spans) == 3


async def test_an_export_to_a_hung_collector_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    receiver = OTLPReceiver("hang").start()
    try:
        exporter = OTLPHttpExporter(receiver.base_url + "/v1/traces", {}, timeout_s=0.4)
        began = time.monotonic()
        assert not await exporter.export(b"")
        assert time.monotonic() - began < 1.5
        await exporter.close()
    finally:
        receiver.stop()


async def test_a_whole_batch_is_exported_at_once_and_a_partial_one_on_the_schedule(
    receiver: OTLPReceiver,
) -> None:
    env = {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "6", "OTEL_BSP_SCHEDULE_DELAY": "300"}
    tracing = traced(receiver, env, requests=2)  # 6 spans: a whole batch, no flush asked
    assert len(await spans_within(receiver, 6, 1.0)) == 6
    one_failover(tracing.start_request({}, "/v1/chat/completions", "POST"))  # 3: half a batch
    began = time.monotonic()
    assert len(await spans_within(receiver, 9, 2.0)) == 9
    assert time.monotonic() - began >= 0.1  # the schedule's, not at once
    assert receiver.posts == 2
    assert await tracing.shutdown(5.0)


async def test_spans_past_the_queue_bound_are_dropped_and_counted() -> None:
    receiver = OTLPReceiver("hang").start()
    try:
        env = {"OTEL_BSP_MAX_QUEUE_SIZE": "4", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "4"}
        tracing = traced(receiver, env, requests=1)  # 3 queued
        one_failover(tracing.start_request({}, "/v1/chat/completions", "POST"))
        # the 4th filled a batch: its export hangs, taking 4; 2 more queued, none dropped yet
        await asyncio.sleep(0.1)
        for _ in range(2):
            one_failover(tracing.start_request({}, "/v1/chat/completions", "POST"))
        processor = tracing.processor
        assert processor.queued == 4
        assert processor.dropped == 2 + 3 * 2 - 4
        assert not await tracing.shutdown(0.3)  # the hung export is cancelled
    finally:
        receiver.stop()


async def test_the_export_runs_on_the_event_loop_with_no_thread_of_its_own(
    receiver: OTLPReceiver,
) -> None:
    before = {t.ident for t in threading.enumerate()}
    tracing = traced(receiver, {"OTEL_EXPORTER_OTLP_COMPRESSION": "gzip"}, requests=200)
    assert await tracing.flush(5.0)
    assert len(receiver.spans) == 600
    assert all(sent is not None and sent < decoded for sent, decoded in receiver.sizes)
    new = [t for t in threading.enumerate() if t.ident not in before]
    # the loop's default executor may resolve the collector's name: nothing else starts
    assert all(t.name.startswith(("asyncio_", "ThreadPoolExecutor")) for t in new), new
    assert await tracing.shutdown(5.0)


async def spans_within(receiver: OTLPReceiver, n: int, timeout_s: float) -> list[Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if len(receiver.spans) >= n:
            return list(receiver.spans)
        await asyncio.sleep(0.02)
    raise AssertionError(f"{len(receiver.spans)} spans, {n} awaited")
