"""OpenTelemetry traces (docs/tracing.md): the process's `Tracing` (a TracerProvider whose
batch processor exports over OTLP/HTTP) and each request's `RequestTrace`, a SERVER span
that continues the client's W3C `traceparent` and has a CLIENT child span per upstream
attempt, whose own traceparent the upstream request carries.

This module is imported only when `tracing` is configured (gateway/app.py): with tracing off
neither the SDK nor any of this runs on the request path.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.sampling import ParentBased
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import NonRecordingSpan
from opentelemetry.trace import Span
from opentelemetry.trace import SpanContext
from opentelemetry.trace import SpanKind
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode
from opentelemetry.trace import Tracer
from opentelemetry.trace import set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from gateway.config_base import ProviderBase
from gateway.config_base import effective_base_url
from gateway.config_observe import TracingConfig
from gateway.config_observe import otlp_endpoint
from gateway.providers.semconv import GEN_AI_PROVIDERS

if TYPE_CHECKING:
    from gateway.routing.router import Attempt

log = logging.getLogger(__name__)

EXPORT_TIMEOUT_S = 5.0  # one export's bound (its retries included): a hung collector waits no more
# The SDK's loggers that speak of failed exports: each says so at most once a minute.
EXPORT_LOGGERS = (
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
)
QUIET_S = 60.0


# an attempt span's gen_ai.operation.name, by the request's route (else chat)
ROUTE_OPERATIONS = {"/v1/embeddings": "embeddings", "/v1/messages/count_tokens": "count_tokens"}

_propagator = TraceContextTextMapPropagator()


class _OncePerInterval(logging.Filter):
    """Lets one record of a logger through per `interval` seconds: an unreachable collector
    must not fill the gateway's log with a line per batch."""

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self._lock = threading.Lock()
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        with self._lock:
            if now < self._next.get(record.name, 0.0):
                self._held[record.name] = self._held.get(record.name, 0) + 1
                return False
            self._next[record.name] = now + self.interval
            held = self._held.pop(record.name, 0)
        if held:
            record.msg = f"{record.msg} ({held} more such messages in the last {self.interval:g}s)"
        return True


_quiet = _OncePerInterval(QUIET_S)


def quiet_export_logs() -> None:
    for name in EXPORT_LOGGERS:
        logger = logging.getLogger(name)
        if _quiet not in logger.filters:
            logger.addFilter(_quiet)


def traceparent_of(span: Span) -> str:
    """The W3C traceparent naming `span` (its sampled flag as decided, recorded or not)."""
    ctx = span.get_span_context()
    return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"


def _server_of(url: str) -> tuple[str, str | None, int | None]:
    """url.full without userinfo, query or fragment (where a key may ride), its host and port."""
    parts = urlsplit(url)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netloc = host or ""
    if ":" in netloc:  # an IPv6 literal
        netloc = f"[{netloc}]"
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return f"{parts.scheme}://{netloc}{parts.path}", host, port


class Tracing:
    """The process's tracer: its provider, exporter and batch processor."""

    __slots__ = ("_servers", "content", "provider", "tracer")

    def __init__(self, provider: TracerProvider, content: bool) -> None:
        self.provider = provider
        self.tracer: Tracer = provider.get_tracer("gateway")
        self.content = content
        self._servers: dict[str, dict[str, Any]] = {}  # by base URL: few, parsed once

    def server_of(self, provider: ProviderBase) -> dict[str, Any]:
        """An attempt span's url.full, server.address and server.port for `provider`."""
        try:
            base = effective_base_url(provider)
        except ValueError:
            return {}
        attributes = self._servers.get(base)
        if attributes is None:
            url, host, port = _server_of(base)
            attributes = {"url.full": url, "server.address": host, "server.port": port}
            attributes = {k: v for k, v in attributes.items() if v is not None}
            if len(self._servers) < 1024:  # a reloaded config's providers are added, never many
                self._servers[base] = attributes
        return attributes

    @classmethod
    def from_config(
        cls,
        config: TracingConfig,
        env: Mapping[str, str],
        exporter: SpanExporter | None = None,
    ) -> Tracing:
        """`exporter`: where the spans go instead of OTLP (tests)."""
        if exporter is None:
            endpoint = otlp_endpoint(config, env)
            if endpoint is None:  # a checked config has one
                raise ValueError("tracing needs otlp_endpoint")
            exporter = OTLPSpanExporter(
                endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=EXPORT_TIMEOUT_S
            )
        quiet_export_logs()
        provider = TracerProvider(
            resource=Resource.create({"service.name": config.service_name}),
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            shutdown_on_exit=False,  # shutdown() below, bounded; never an unbounded atexit
        )
        provider.add_span_processor(BatchSpanProcessor(exporter))
        return cls(provider, config.content)

    def start_request(self, headers: Mapping[str, str], route: str, method: str) -> RequestTrace:
        return RequestTrace(self, headers, route, method)

    def shutdown(self, timeout_s: float) -> bool:
        """Export what is queued and stop, within `timeout_s` (a hung collector is left
        behind on a daemon thread). False: it did not finish in time."""

        def stop() -> None:
            try:  # its batch processor exports what is queued, then stops
                self.provider.shutdown()
            except Exception:  # an exporter's failure is no shutdown's
                log.warning("tracing: the span exporter failed while shutting down", exc_info=True)

        thread = threading.Thread(target=stop, name="tracing-shutdown", daemon=True)
        thread.start()
        thread.join(timeout_s)
        if thread.is_alive():
            log.warning("tracing: spans still unexported after %.1fs, left behind", timeout_s)
            return False
        return True


class RequestTrace:
    """One request's spans; the attempt runner's `AttemptTracer`."""

    __slots__ = ("_attempt", "_kind", "_operation", "_tracing", "span")

    def __init__(
        self, tracing: Tracing, headers: Mapping[str, str], route: str, method: str
    ) -> None:
        self._tracing = tracing
        parent = None
        incoming = headers.get("traceparent")
        if incoming is not None:
            carrier = {"traceparent": incoming}
            state = headers.get("tracestate")
            if state is not None:
                carrier["tracestate"] = state
            parent = _propagator.extract(carrier)  # an invalid one: a new trace
        self.span: Span = tracing.tracer.start_span(
            f"{method} {route}",
            context=parent,
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method, "http.route": route},
        )
        self._attempt: Span | None = None
        self._kind: str | None = None  # the last attempt's provider kind
        self._operation = ROUTE_OPERATIONS.get(route, "chat")

    @property
    def traceparent(self) -> str:
        """The request span's own traceparent."""
        return traceparent_of(self.span)

    @property
    def wants_content(self) -> bool:
        """Whether prompt and completion text are kept (`content: true`) and recorded."""
        return self._tracing.content and self.span.is_recording()

    def prompt(self, text: str) -> None:
        """The prompt's text, as a span event; only with `content: true`."""
        if self.wants_content:
            self.span.add_event("gen_ai.content.prompt", {"gen_ai.prompt": text})

    def completion(self, text: str) -> None:
        """The completion's text, as a span event; only with `content: true`."""
        if self.wants_content:
            self.span.add_event("gen_ai.content.completion", {"gen_ai.completion": text})

    def attempt_started(self, attempt: Attempt) -> str | None:
        if self._attempt is not None:  # a previous attempt not told its end: ended unknown
            self._attempt.end()
        provider = attempt.provider
        self._kind = provider.kind
        parent = self.span
        tracing = self._tracing
        if not parent.is_recording():
            # the parent-based sampler drops every child of a dropped span: the SDK's own
            # decision, without its cost (a new span id in the parent's trace and flags)
            ctx = parent.get_span_context()
            span: Span = NonRecordingSpan(
                SpanContext(
                    ctx.trace_id,
                    tracing.provider.id_generator.generate_span_id(),
                    is_remote=False,
                    trace_flags=ctx.trace_flags,
                    trace_state=ctx.trace_state,
                )
            )
        else:
            span = tracing.tracer.start_span(
                f"{self._operation} {attempt.model}",
                context=set_span_in_context(parent),
                kind=SpanKind.CLIENT,
                attributes={
                    "http.request.method": "POST",
                    "gen_ai.operation.name": self._operation,
                    "gen_ai.provider.name": GEN_AI_PROVIDERS.get(provider.kind, provider.kind),
                    "gen_ai.request.model": attempt.model,
                    "gateway.provider": provider.name,
                    **tracing.server_of(provider),
                },
            )
        self._attempt = span
        return traceparent_of(span)

    def attempt_ended(self, status: int | None, error: str | None) -> None:
        span, self._attempt = self._attempt, None
        if span is None:
            return
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if error is not None:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR))
        span.end()

    def finish(
        self,
        *,
        status: int,
        model: str | None,
        provider: str | None,
        response_model: str | None,
        input_tokens: int | None,
        output_tokens: int | None,
        finish_reason: str | None,
        error: str | None,
        operation: str,
    ) -> None:
        """The request's end: its span named and given what the request came to, ended."""
        if self._attempt is not None:
            self.attempt_ended(None, error or "cancelled")
        span = self.span
        if not span.is_recording():
            span.end()
            return
        if model:
            span.update_name(f"{operation} {model}")
        values: dict[str, Any] = {
            "gen_ai.operation.name": operation,
            "http.response.status_code": status,
            "gen_ai.request.model": model,
            "gen_ai.response.model": response_model,
            "gen_ai.usage.input_tokens": input_tokens,
            "gen_ai.usage.output_tokens": output_tokens,
            "gateway.provider": provider,
        }
        if self._kind is not None:
            values["gen_ai.provider.name"] = GEN_AI_PROVIDERS.get(self._kind, self._kind)
        if finish_reason is not None:
            values["gen_ai.response.finish_reasons"] = [finish_reason]
        if error is None and status >= 500:
            error = str(status)
        if error is not None:
            values["error.type"] = error
        span.set_attributes({k: v for k, v in values.items() if v is not None})
        if status >= 500:  # a server span's 4xx is the client's error, not the server's
            span.set_status(Status(StatusCode.ERROR))
        span.end()
