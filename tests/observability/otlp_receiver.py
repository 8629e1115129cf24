"""An OTLP/HTTP trace receiver on loopback, as a collector is one: POST /v1/traces with a
protobuf `ExportTraceServiceRequest`, decoded with the real OTLP protos and kept as
`Received` spans. `mode` makes it fail: "fail" answers 500, "hang" never answers;
`answers` scripts the statuses (with a Retry-After) of the next posts before it takes any."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto

from tests.upstreams.threaded import ThreadedUpstream

KINDS = {
    SpanProto.SPAN_KIND_SERVER: "server",
    SpanProto.SPAN_KIND_CLIENT: "client",
    SpanProto.SPAN_KIND_INTERNAL: "internal",
}


def value_of(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [value_of(v) for v in value.array_value.values]
    if which is None:
        return None
    return getattr(value, which)


class Received:
    """One exported span, in plain Python."""

    def __init__(self, span: SpanProto, resource: dict[str, Any]) -> None:
        self.name = span.name
        self.kind = KINDS.get(span.kind, str(span.kind))
        self.trace_id = span.trace_id.hex()
        self.span_id = span.span_id.hex()
        self.parent_id = span.parent_span_id.hex() or None
        self.attributes = {a.key: value_of(a.value) for a in span.attributes}
        self.events = [
            (e.name, {a.key: value_of(a.value) for a in e.attributes}) for e in span.events
        ]
        self.status_code = span.status.code
        self.resource = resource
        self.trace_state = span.trace_state

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r} {self.trace_id}/{self.span_id}<-{self.parent_id}>"


class OTLPReceiver(ThreadedUpstream):
    name = "otlp-receiver"

    def __init__(self, mode: str = "ok") -> None:
        super().__init__()
        self.mode = mode
        self.spans: list[Received] = []
        self.posts = 0  # export requests received, answered or not
        self.headers: list[dict[str, str]] = []  # each post's
        self.sizes: list[tuple[int | None, int]] = []  # each body's, as sent and as decoded
        self.answers: list[tuple[int, str | None]] = []  # (status, Retry-After) to answer first
        self._lock = threading.Lock()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/traces", self._traces)

    async def _traces(self, request: web.Request) -> web.Response:
        with self._lock:
            self.posts += 1
            self.headers.append({k.lower(): v for k, v in request.headers.items()})
            scripted = self.answers.pop(0) if self.answers else None
        if scripted is not None:
            status, retry_after = scripted
            headers = {"Retry-After": retry_after} if retry_after is not None else {}
            return web.Response(status=status, text="scripted", headers=headers)
        if self.mode == "hang":
            await asyncio.sleep(3600)
        if self.mode == "fail":
            return web.Response(status=500, text="collector down")
        assert request.content_type == "application/x-protobuf", request.content_type
        data = await request.read()  # aiohttp undoes a Content-Encoding (gzip, deflate)
        with self._lock:
            self.sizes.append((request.content_length, len(data)))
        export = ExportTraceServiceRequest()
        export.ParseFromString(data)
        received = []
        for resource_spans in export.resource_spans:
            resource = {a.key: value_of(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                received.extend(Received(span, resource) for span in scope_spans.spans)
        with self._lock:
            self.spans.extend(received)
        return web.Response(
            body=ExportTraceServiceResponse().SerializeToString(),
            content_type="application/x-protobuf",
        )

    def wait_for(self, n: int, timeout_s: float = 10.0) -> list[Received]:
        """At least `n` spans (the batch processor exports on its own schedule)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.spans) >= n:
                    return list(self.spans)
            time.sleep(0.02)
        raise AssertionError(f"{len(self.spans)} spans received, {n} awaited: {self.spans}")
