"""Microbenchmark of what tracing adds to one request's path (docs/tracing.md, "Cost").

Each round is one request through the gateway's real middleware (`gateway_middleware`, as
`build_app` installs it: request id, record, metrics, access line) around a handler that
does what a served chat request does for the trace: fills the record in and, when the
request has a trace, tells it of one attempt as the attempt runner does and takes the
traceparent for the upstream request.

- `off`: no `tracing` section; the middleware is built without observers, so none of the
  tracing code runs (the only difference from a gateway before tracing is an `is not None`).
- `on`: tracing configured, every request sampled: a SERVER and a CLIENT span per request,
  handed to the gateway's batch processor as the WireSpans production queues (its exporter,
  the gateway's own, counts the batches' bodies instead of POSTing them).
- `on-unsampled`: `sample_ratio: 0`: spans decided and dropped, the traceparent still made.

- `encode`: what the batch processor spends per span on the OTLP body (on the event loop):
  the SDK's encoder (`sdk`) against otlp_wire's (`wire`), over a batch of the spans the
  `on` variant makes.

    .venv/bin/python -m pytest -q bench/micro/test_tracing.py --benchmark-enable --benchmark-only

Every variant checks what it did (spans exported, a traceparent or none), so a broken path
fails instead of looking fast.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from collections.abc import Iterator
from collections.abc import Sequence
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.app import build_app
from gateway.config import parse_config
from gateway.config_observe import TracingConfig
from gateway.observability.access import RECORD
from gateway.observability.otlp_exporter import OTLPHttpExporter
from gateway.observability.otlp_wire import export_request
from gateway.observability.tracing import Tracing
from gateway.server.errors import gateway_middleware
from gateway.server.observers import Observers
from gateway.server.state import STATE

PerEvent = Callable[[int], None]
CONFIG = """
store: {url: "memory://"}
providers:
  - {name: up, kind: openai, base_url: "http://127.0.0.1:9/v1", keys: [{key: k}]}
"""


class CountingExporter(SpanExporter):
    """Takes the batch processor's spans and counts them (the OTLP encode and POST happen on
    the processor's thread, off the request path, either way); keeps the first `keep`."""

    def __init__(self, keep: int = 0) -> None:
        self.spans = 0
        self.keep = keep
        self.kept: list[ReadableSpan] = []

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.spans += len(spans)
        if len(self.kept) < self.keep:
            self.kept += spans[: self.keep - len(self.kept)]
        return SpanExportResult.SUCCESS


class WireCountingExporter(OTLPHttpExporter):
    """The gateway's own exporter (so the spans are what production queues: WireSpans,
    joined into one body a batch), counting the bodies instead of POSTing them."""

    def __init__(self) -> None:
        super().__init__("http://127.0.0.1:9/v1/traces", {}, timeout_s=1.0)
        self.bodies = 0

    async def export(self, body: bytes) -> bool:
        self.bodies += 1
        assert body
        return True


class Bench:
    """One mocked request through the middleware, on a private event loop; `keep`: the
    spans go to a CountingExporter as whole ReadableSpans (for the encoders' benchmark)."""

    def __init__(self, ratio: float | None, keep: int = 0) -> None:
        self.loop = asyncio.new_event_loop()
        config = parse_config(CONFIG, env={})
        self.app = build_app(config)
        state = self.app[STATE]
        self.attempt = state.router.plan("up/text")[0]
        self.exporter: CountingExporter | WireCountingExporter = (
            CountingExporter(keep) if keep else WireCountingExporter()
        )
        self.tracing = None
        self.sampled = ratio == 1.0
        observers = None
        if ratio is not None:
            tracing_config = TracingConfig(otlp_endpoint="http://127.0.0.1:9", sample_ratio=ratio)
            self.tracing = Tracing.from_config(tracing_config, {}, exporter=self.exporter)
            observers = Observers(config, None, self.tracing)
        self.middleware = gateway_middleware(self.attempt.metrics, observers)
        self.request = make_mocked_request(
            "POST",
            "/v1/chat/completions",
            headers={"content-type": "application/json"},
            app=self.app,
        )
        match_info = self.loop.run_until_complete(self.app.router.resolve(self.request))
        match_info.add_app(self.app)
        self.request._match_info = match_info  # as aiohttp's handler sets it: route_of reads it
        self.sent: list[str | None] = []
        self.answer = web.Response(body=b"{}", content_type="application/json")

    async def handler(self, request: web.Request) -> web.StreamResponse:
        record = request[RECORD]
        record.model, record.provider, record.upstream_model = "up/text", "up", "text"
        record.input_tokens, record.output_tokens, record.finish_reason = 12, 34, "stop"
        trace = record.trace
        traceparent = None
        if trace is not None:  # as the attempt runner and the actor do
            traceparent = trace.attempt_started(self.attempt)
            trace.attempt_ended(200, None)
        self.sent.append(traceparent)
        return self.answer

    def one(self) -> int:
        response = self.loop.run_until_complete(self.middleware(self.request, self.handler))
        return response.status

    def close(self) -> None:
        if self.tracing is not None:
            assert self.loop.run_until_complete(self.tracing.shutdown(10.0))
        self.loop.close()


@pytest.fixture
def bench(request: pytest.FixtureRequest) -> Iterator[Bench]:
    ratio = {"off": None, "on": 1.0, "on-unsampled": 0.0}[request.param]
    b = Bench(ratio)
    yield b
    b.close()


@pytest.mark.benchmark(group="tracing")
@pytest.mark.parametrize("bench", ["off", "on", "on-unsampled"], indirect=True)
def test_request_path_tracing(benchmark: Any, per_event: PerEvent, bench: Bench) -> None:
    per_event(1)  # one request per round
    status = benchmark(bench.one)
    assert status == 200
    requests = len(bench.sent)
    assert requests >= 1
    if bench.tracing is None:
        assert bench.sent == [None] * requests  # no trace, no traceparent
        return
    flags = {tp.rsplit("-", 1)[1] if tp else None for tp in bench.sent}
    sampled = bench.sampled
    assert all(f is not None and bool(int(f, 16) & 1) is sampled for f in flags)
    assert bench.loop.run_until_complete(bench.tracing.flush(10.0))
    assert bench.tracing.processor.exported == (2 * requests if sampled else 0)


BATCH = 512  # the batch processor's default export batch


@pytest.fixture(scope="module")
def batch() -> list[ReadableSpan]:
    """BATCH spans as the `on` variant makes them (a request span and an attempt span each)."""
    b = Bench(1.0, keep=BATCH)
    assert isinstance(b.exporter, CountingExporter)
    try:
        for _ in range(BATCH // 2):
            b.one()
        assert b.tracing is not None
        assert b.loop.run_until_complete(b.tracing.flush(10.0))
    finally:
        b.close()
    assert len(b.exporter.kept) == BATCH
    return b.exporter.kept


@pytest.mark.benchmark(group="tracing-encode")
@pytest.mark.parametrize("encoder", ["sdk", "wire"])
def test_otlp_encode(
    benchmark: Any, per_event: PerEvent, batch: list[ReadableSpan], encoder: str
) -> None:
    per_event(BATCH)  # per span
    encode: Callable[[list[ReadableSpan]], bytes] = (
        (lambda spans: encode_spans(spans).SerializePartialToString())
        if encoder == "sdk"
        else export_request
    )
    body = benchmark(encode, batch)
    decoded = ExportTraceServiceRequest.FromString(body)
    assert sum(len(s.spans) for r in decoded.resource_spans for s in r.scope_spans) == BATCH
