"""OpenTelemetry traces (docs/tracing.md): the process's `Tracing` (a TracerProvider whose
batch processor exports over OTLP/HTTP) and each request's `RequestTrace`, a SERVER span
that continues the client's W3C `traceparent` and has a CLIENT child span per upstream
attempt, whose own traceparent the upstream request carries.

This module is imported only when `tracing` is configured (gateway/app.py): with tracing off
neither the SDK nor any of this runs on the request path.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import DEFAULT_TRACE_STATE
from opentelemetry.trace import SpanContext
from opentelemetry.trace import SpanKind
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode
from opentelemetry.trace import TraceFlags
from opentelemetry.trace import TraceState

from gateway.config_base import ProviderBase
from gateway.config_base import effective_base_url
from gateway.config_observe import TracingConfig
from gateway.config_observe import otlp_endpoint
from gateway.observability.export_logs import quiet_export_logs
from gateway.observability.otlp_exporter import WireOTLPSpanExporter
from gateway.providers.semconv import GEN_AI_PROVIDERS

if TYPE_CHECKING:
    from gateway.routing.router import Attempt

log = logging.getLogger(__name__)

EXPORT_TIMEOUT_S = 5.0  # one export's bound (its retries included): a hung collector waits no more
# an attempt span's gen_ai.operation.name, by the request's route (else chat)
ROUTE_OPERATIONS = {"/v1/embeddings": "embeddings", "/v1/messages/count_tokens": "count_tokens"}

TRACE_ID_LIMIT = TraceIdRatioBased.TRACE_ID_LIMIT  # the ratio sampler reads these bits
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
UNSET = Status(StatusCode.UNSET)
ERROR = Status(StatusCode.ERROR)
# W3C Trace Context, level 1 (as the SDK's propagator reads it): version-traceid-spanid-flags
_TRACEPARENT = re.compile(
    r"^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(?:(-.*)|[ \t]*)$"
)
TRACEPARENT_MAX = 512
TRACESTATE_MAX = 512


def parse_traceparent(header: str, state: str | None) -> SpanContext | None:
    """A client's span (remote) from its `traceparent` and `tracestate`; None when the
    traceparent is not valid (the request then starts a trace of its own)."""
    if len(header) > TRACEPARENT_MAX:
        return None
    match = _TRACEPARENT.match(header)
    if match is None:
        return None
    version, trace_id, span_id, flags, rest = match.groups()
    if trace_id == "0" * 32 or span_id == "0" * 16 or version == "ff":
        return None
    if version == "00" and rest:
        return None
    trace_state = DEFAULT_TRACE_STATE
    if state is not None and len(state) <= TRACESTATE_MAX:
        trace_state = TraceState.from_header([state])
    return SpanContext(
        int(trace_id, 16), int(span_id, 16), True, TraceFlags(int(flags, 16)), trace_state
    )


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
    """The process's tracer: its provider (what flushes and shuts down the processor), the
    batch processor the requests' spans go to, the exporter behind it, and the sampling
    bound of TraceIdRatioBased for requests that start their trace."""

    __slots__ = (
        "_servers",
        "bound",
        "content",
        "ids",
        "processor",
        "provider",
        "resource",
        "scope",
    )

    def __init__(
        self,
        provider: TracerProvider,
        processor: BatchSpanProcessor,
        sample_ratio: float,
        content: bool,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.resource = provider.resource
        self.scope = InstrumentationScope("gateway")
        self.ids = RandomIdGenerator()
        self.bound = TraceIdRatioBased.get_bound_for_rate(sample_ratio)
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
            exporter = WireOTLPSpanExporter(
                endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=EXPORT_TIMEOUT_S
            )
        quiet_export_logs()
        provider = TracerProvider(
            resource=Resource.create({"service.name": config.service_name}),
            # the decision RequestTrace takes itself, for anything else that would start a span
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            shutdown_on_exit=False,  # shutdown() below, bounded; never an unbounded atexit
        )
        processor = BatchSpanProcessor(exporter)
        provider.add_span_processor(processor)
        return cls(provider, processor, config.sample_ratio, config.content)

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


class _AttemptSpan:
    """An attempt's span while it runs: what its ReadableSpan is built from at its end."""

    __slots__ = ("attributes", "name", "span_id", "start_ns")

    def __init__(self, span_id: int, name: str, attributes: dict[str, Any]) -> None:
        self.span_id = span_id
        self.name = name
        self.attributes = attributes
        self.start_ns = time.time_ns()


class RequestTrace:
    """One request's spans; the attempt runner's `AttemptTracer`.

    Its spans are recorded as plain values and become SDK `ReadableSpan`s only as each
    ends, handed straight to the batch processor: the SDK's live `Span` (a lock, bounded
    attribute validation per value, a sampler call and a context per span) cost ~110 µs a
    request, more than a third of the whole request's CPU. The sampling decision is the
    SDK's ParentBased(TraceIdRatioBased), taken once for the request: its attempts follow it."""

    __slots__ = (
        "_attempt",
        "_events",
        "_kind",
        "_method",
        "_operation",
        "_route",
        "_tracing",
        "context",
        "name",
        "parent",
        "sampled",
        "start_ns",
    )

    def __init__(
        self, tracing: Tracing, headers: Mapping[str, str], route: str, method: str
    ) -> None:
        self._tracing = tracing
        self.start_ns = time.time_ns()
        incoming = headers.get("traceparent")
        parent = None
        if incoming is not None:  # an invalid one: a new trace
            parent = parse_traceparent(incoming, headers.get("tracestate"))
        ids = tracing.ids
        if parent is None:
            trace_id = ids.generate_trace_id()
            self.sampled = trace_id & TRACE_ID_LIMIT < tracing.bound
            flags, state = SAMPLED if self.sampled else NOT_SAMPLED, DEFAULT_TRACE_STATE
        else:
            trace_id, flags, state = parent.trace_id, parent.trace_flags, parent.trace_state
            self.sampled = flags.sampled
        self.parent = parent
        self.context = SpanContext(trace_id, ids.generate_span_id(), False, flags, state)
        self.name = f"{method} {route}"
        self._attempt: _AttemptSpan | None = None
        self._events: list[Event] | None = []  # None: the request span has ended
        self._kind: str | None = None  # the last attempt's provider kind
        self._operation = ROUTE_OPERATIONS.get(route, "chat")
        self._method = method
        self._route = route

    @property
    def traceparent(self) -> str:
        """The request span's own traceparent."""
        ctx = self.context
        return f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{int(ctx.trace_flags):02x}"

    @property
    def wants_content(self) -> bool:
        """Whether prompt and completion text are kept (`content: true`) and recorded."""
        return self._tracing.content and self.sampled and self._events is not None

    def prompt(self, text: str) -> None:
        """The prompt's text, as a span event; only with `content: true`."""
        if self.wants_content and self._events is not None:
            self._events.append(
                Event("gen_ai.content.prompt", {"gen_ai.prompt": text}, time.time_ns())
            )

    def completion(self, text: str) -> None:
        """The completion's text, as a span event; only with `content: true`."""
        if self.wants_content and self._events is not None:
            self._events.append(
                Event("gen_ai.content.completion", {"gen_ai.completion": text}, time.time_ns())
            )

    def attempt_started(self, attempt: Attempt) -> str | None:
        if self._attempt is not None:  # a previous attempt not told its end: ended unknown
            self.attempt_ended(None, None)
        provider = attempt.provider
        self._kind = provider.kind
        ctx = self.context
        span_id = self._tracing.ids.generate_span_id()
        if self.sampled:
            tracing = self._tracing
            self._attempt = _AttemptSpan(
                span_id,
                f"{self._operation} {attempt.model}",
                {
                    "http.request.method": "POST",
                    "gen_ai.operation.name": self._operation,
                    "gen_ai.provider.name": GEN_AI_PROVIDERS.get(provider.kind, provider.kind),
                    "gen_ai.request.model": attempt.model,
                    "gateway.provider": provider.name,
                    **tracing.server_of(provider),
                },
            )
        return f"00-{ctx.trace_id:032x}-{span_id:016x}-{int(ctx.trace_flags):02x}"

    def attempt_ended(self, status: int | None, error: str | None) -> None:
        attempt, self._attempt = self._attempt, None
        if attempt is None:
            return
        attributes = attempt.attributes
        if status is not None:
            attributes["http.response.status_code"] = status
        if error is not None:
            attributes["error.type"] = error
        ctx = self.context
        tracing = self._tracing
        tracing.processor.on_end(
            ReadableSpan(
                attempt.name,
                SpanContext(ctx.trace_id, attempt.span_id, False, ctx.trace_flags, ctx.trace_state),
                ctx,
                tracing.resource,
                attributes,
                kind=SpanKind.CLIENT,
                status=ERROR if error is not None else UNSET,
                start_time=attempt.start_ns,
                end_time=time.time_ns(),
                instrumentation_scope=tracing.scope,
            )
        )

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
        events, self._events = self._events, None
        if not self.sampled or events is None:  # unsampled, or finished already
            return
        attributes: dict[str, Any] = {
            "http.request.method": self._method,
            "http.route": self._route,
            "gen_ai.operation.name": operation,
            "http.response.status_code": status,
        }
        if model:
            attributes["gen_ai.request.model"] = model
        if response_model:
            attributes["gen_ai.response.model"] = response_model
        if input_tokens is not None:
            attributes["gen_ai.usage.input_tokens"] = input_tokens
        if output_tokens is not None:
            attributes["gen_ai.usage.output_tokens"] = output_tokens
        if provider:
            attributes["gateway.provider"] = provider
        if self._kind is not None:
            attributes["gen_ai.provider.name"] = GEN_AI_PROVIDERS.get(self._kind, self._kind)
        if finish_reason is not None:
            attributes["gen_ai.response.finish_reasons"] = (finish_reason,)
        if error is None and status >= 500:
            error = str(status)
        if error is not None:
            attributes["error.type"] = error
        tracing = self._tracing
        tracing.processor.on_end(
            ReadableSpan(
                f"{operation} {model}" if model else self.name,
                self.context,
                self.parent,
                tracing.resource,
                attributes,
                events,
                kind=SpanKind.SERVER,
                # a server span's 4xx is the client's error, not the server's
                status=ERROR if status >= 500 else UNSET,
                start_time=self.start_ns,
                end_time=time.time_ns(),
                instrumentation_scope=tracing.scope,
            )
        )
