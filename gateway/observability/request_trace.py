"""One request's spans (docs/tracing.md): a SERVER span that continues the client's W3C
`traceparent` and a CLIENT child span per upstream attempt, whose own traceparent the
upstream request carries; each encoded as it ends, for the batch processor of the
process's `Tracing` (gateway/observability/tracing.py)."""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any

from opentelemetry.sdk.trace import Event
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace import DEFAULT_TRACE_STATE
from opentelemetry.trace import SpanContext
from opentelemetry.trace import SpanKind
from opentelemetry.trace import Status
from opentelemetry.trace import StatusCode
from opentelemetry.trace import TraceFlags
from opentelemetry.trace import TraceState

from gateway.observability.otlp_wire import STATUS_ERROR
from gateway.observability.otlp_wire import STATUS_UNSET
from gateway.observability.otlp_wire import int_attribute
from gateway.observability.otlp_wire import span_field
from gateway.observability.otlp_wire import text_attribute
from gateway.observability.otlp_wire import trace_state_field
from gateway.providers.semconv import GEN_AI_PROVIDERS

if TYPE_CHECKING:
    from gateway.observability.tracing import Tracing
    from gateway.routing.router import Attempt

# an attempt span's gen_ai.operation.name, by the request's route (else chat)
ROUTE_OPERATIONS = {"/v1/embeddings": "embeddings", "/v1/messages/count_tokens": "count_tokens"}
TRACE_ID_LIMIT = TraceIdRatioBased.TRACE_ID_LIMIT  # the ratio sampler reads these bits
SAMPLED = TraceFlags(TraceFlags.SAMPLED)
NOT_SAMPLED = TraceFlags(TraceFlags.DEFAULT)
OTLP_SERVER, OTLP_CLIENT = 2, 3  # OTLP's SpanKind values
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


class WiredSpan(ReadableSpan):
    """A finished span that carries its OTLP encoding (`wire`, otlp_wire.span_field), made
    as the span ends from the values at hand, so that an export only joins bytes. Made for
    an exporter other than the gateway's (which takes the bytes alone): a whole
    ReadableSpan for it."""

    def __init__(self, wire: bytes, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.wire = wire


class _AttemptSpan:
    """An attempt's span while it runs: what its ReadableSpan is built from at its end."""

    __slots__ = ("encoded", "fixed", "name", "span_id", "start_ns")

    def __init__(self, span_id: int, name: str, fixed: tuple[dict[str, Any], bytes]) -> None:
        self.span_id = span_id
        self.name = name
        self.fixed, self.encoded = fixed
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
        "_state_field",
        "_tp_head",
        "_tp_tail",
        "_trace_bytes",
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
        # every traceparent of the request but its span id, formatted once
        self._tp_head, self._tp_tail = f"00-{trace_id:032x}-", f"-{int(flags):02x}"
        self._trace_bytes = trace_id.to_bytes(16, "big")
        self._state_field = trace_state_field(state)
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
        return f"{self._tp_head}{self.context.span_id:016x}{self._tp_tail}"

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
        span_id = self._tracing.ids.generate_span_id()
        if self.sampled:
            tracing = self._tracing
            operation, model = self._operation, attempt.model
            key = (provider.name, model, operation)
            fixed = tracing.fixed(key)
            if fixed is None:
                values = {
                    "http.request.method": "POST",
                    "gen_ai.operation.name": operation,
                    "gen_ai.provider.name": GEN_AI_PROVIDERS.get(provider.kind, provider.kind),
                    "gen_ai.request.model": model,
                    "gateway.provider": provider.name,
                    **tracing.server_of(provider),
                }
                fixed = tracing.fixed(key, values)
                assert fixed is not None
            self._attempt = _AttemptSpan(span_id, f"{operation} {model}", fixed)
        return f"{self._tp_head}{span_id:016x}{self._tp_tail}"

    def attempt_ended(self, status: int | None, error: str | None) -> None:
        attempt, self._attempt = self._attempt, None
        if attempt is None:
            return
        encoded = attempt.encoded
        if status is not None:
            encoded += int_attribute("http.response.status_code", status)
        if error is not None:
            encoded += text_attribute("error.type", error)
        ctx = self.context
        tracing = self._tracing
        end = time.time_ns()
        wire = span_field(
            self._trace_bytes,
            attempt.span_id,
            self._state_field,
            ctx.span_id,
            False,
            attempt.name,
            OTLP_CLIENT,
            attempt.start_ns,
            end,
            encoded,
            (),
            STATUS_ERROR if error is not None else STATUS_UNSET,
        )
        if tracing.wire_only:  # the attempt's span shares the request's (sampled) context
            tracing.processor.add_wire(wire)
            return
        varying: dict[str, Any] = {}
        if status is not None:
            varying["http.response.status_code"] = status
        if error is not None:
            varying["error.type"] = error
        tracing.processor.on_end(
            WiredSpan(
                wire,
                attempt.name,
                SpanContext(ctx.trace_id, attempt.span_id, False, ctx.trace_flags, ctx.trace_state),
                ctx,
                tracing.resource,
                {**attempt.fixed, **varying},
                kind=SpanKind.CLIENT,
                status=ERROR if error is not None else UNSET,
                start_time=attempt.start_ns,
                end_time=end,
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
        tracing = self._tracing
        kind = self._kind
        key = ("", self._route, operation, model, response_model, provider, kind)
        fixed = tracing.fixed(key)
        if fixed is None:
            values: dict[str, Any] = {
                "http.request.method": self._method,
                "http.route": self._route,
                "gen_ai.operation.name": operation,
            }
            if model:
                values["gen_ai.request.model"] = model
            if response_model:
                values["gen_ai.response.model"] = response_model
            if provider:
                values["gateway.provider"] = provider
            if kind is not None:
                values["gen_ai.provider.name"] = GEN_AI_PROVIDERS.get(kind, kind)
            fixed = tracing.fixed(key, values)
            assert fixed is not None
        if error is None and status >= 500:
            error = str(status)
        # the attributes that vary, in the order the SDK's dict would give them
        encoded = fixed[1] + int_attribute("http.response.status_code", status)
        if input_tokens is not None:
            encoded += int_attribute("gen_ai.usage.input_tokens", input_tokens)
        if output_tokens is not None:
            encoded += int_attribute("gen_ai.usage.output_tokens", output_tokens)
        if finish_reason is not None:
            encoded += text_attribute("gen_ai.response.finish_reasons", (finish_reason,))
        if error is not None:
            encoded += text_attribute("error.type", error)
        name = f"{operation} {model}" if model else self.name
        end = time.time_ns()
        parent = self.parent
        failed = status >= 500  # a server span's 4xx is the client's error, not the server's
        wire = span_field(
            self._trace_bytes,
            self.context.span_id,
            self._state_field,
            None if parent is None else parent.span_id,
            parent is not None,  # a parent is the client's, remote
            name,
            OTLP_SERVER,
            self.start_ns,
            end,
            encoded,
            events,
            STATUS_ERROR if failed else STATUS_UNSET,
        )
        if tracing.wire_only:
            tracing.processor.add_wire(wire)
            return
        varying: dict[str, Any] = {"http.response.status_code": status}
        if input_tokens is not None:
            varying["gen_ai.usage.input_tokens"] = input_tokens
        if output_tokens is not None:
            varying["gen_ai.usage.output_tokens"] = output_tokens
        if finish_reason is not None:
            varying["gen_ai.response.finish_reasons"] = (finish_reason,)
        if error is not None:
            varying["error.type"] = error
        tracing.processor.on_end(
            WiredSpan(
                wire,
                name,
                self.context,
                parent,
                tracing.resource,
                {**fixed[0], **varying},
                events,
                kind=SpanKind.SERVER,
                status=ERROR if failed else UNSET,
                start_time=self.start_ns,
                end_time=end,
                instrumentation_scope=tracing.scope,
            )
        )
