"""What happened to each request, told once when it ends: the request metrics and one JSON
access-log line.

The gateway's one middleware (gateway/server/errors.py) puts a `RequestRecord` on the
request; the handlers that serve through an upstream fill in the model, provider, attempts,
usage, cost and timings (gateway/server/inference.py, embeddings.py). When the handler is
done (`observe_failure` first when it raised), `finish` updates the metrics
(docs/metrics.md) and writes the access line (docs/operations.md). `/metrics`, `/healthz`
and `/readyz` are neither counted nor logged.

Times are `time.perf_counter()` (uvloop's `loop.time()` has millisecond resolution; the
overhead is measured in microseconds).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import msgspec
from aiohttp import web

from gateway.errors import ClientError
from gateway.errors import GatewayError
from gateway.errors import NoUpstreamAvailable
from gateway.observability.logs import ACCESS_FLUSH_S
from gateway.observability.logs import ACCESS_LOGGER
from gateway.observability.logs import flush_access_log
from gateway.observability.logs import iso_time
from gateway.observability.logs import log_access_line
from gateway.observability.metrics import NO_PROVIDER
from gateway.observability.metrics import OTHER_ROUTE
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_entry import AttemptEntry

if TYPE_CHECKING:
    from gateway.observability.request_trace import RequestTrace
    from gateway.stream.accumulator import StreamAccumulator

UNOBSERVED = frozenset({"/metrics", "/healthz", "/readyz"})
CLIENT_CLOSED = 499  # nginx's word for a client that left before its answer
_REJECTION_BY_STATUS = {
    400: "bad_request",
    401: "auth",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    429: "rate_limited",
}
_REJECTION_BY_CODE = {
    "budget_exceeded": "budget_exceeded",
    "model_not_allowed": "model_not_allowed",
    "model_not_priced": "model_not_priced",
    "request_timeout": "client_body_timeout",  # the head's own timeout is counted where it fires
    "server_shutting_down": "shutting_down",
}
access_log = logging.getLogger(ACCESS_LOGGER)
_PID = os.getpid()  # a module of a spawned worker is imported in that worker


class RequestRecord:
    """One request's facts, filled in by whoever learns them. Token counts and cost are
    None when nothing was settled; `first_token_at` is 0 when no output came."""

    __slots__ = (
        "attempts",
        "cache",
        "cache_saved_usd",
        "cached_tokens",
        "cost_usd",
        "error",
        "error_message",
        "failed_status",
        "finish_reason",
        "first_token_at",
        "input_tokens",
        "journal",
        "kept",
        "key",
        "key_id",
        "model",
        "output_tokens",
        "overhead_s",
        "provider",
        "reasoning_tokens",
        "received",
        "request_body",
        "response_body",
        "route",
        "stream",
        "trace",
        "upstream_model",
    )

    def __init__(self, received: float, route: str) -> None:
        self.received = received
        self.route = route
        self.model: str | None = None  # as the client sent it (the access log only)
        self.provider: str | None = None  # the configured provider of the last attempt
        self.upstream_model: str | None = None
        self.attempts = 0
        self.stream = False
        self.key: str | None = None  # the virtual key's name, `master`, or None
        self.input_tokens: int | None = None
        self.output_tokens: int | None = None
        self.cached_tokens: int | None = None
        self.cost_usd: float | None = None
        self.first_token_at = 0.0
        self.overhead_s: float | None = None  # None: no upstream request was sent
        self.error: str | None = None  # the error's code (or type) when it failed
        # a stream that failed after its commit point: the status its error would have had
        self.failed_status: int | None = None
        # Set only when the request log or tracing is on (gateway/server/errors.py): `kept`
        # (either keeps this request), the journal of every attempt's end (the request log)
        # and the request's trace (tracing); what else they keep (finish reason, ...).
        self.kept = False
        self.journal: list[AttemptEntry] | None = None
        self.trace: RequestTrace | None = None
        self.key_id: str | None = None
        self.finish_reason: str | None = None
        self.reasoning_tokens: int | None = None
        self.error_message: str | None = None
        self.request_body: bytes | None = None  # the client's body (request_log.bodies)
        # the answer's body, or (a stream) the accumulator it is made from when needed
        self.response_body: bytes | StreamAccumulator | None = None
        self.cache: str | None = None  # hit | miss | bypass: the response cache's answer
        self.cache_saved_usd: float | None = None  # a hit: what its answer cost first


RECORD = web.RequestKey("request_record", RequestRecord)


class AccessLine(msgspec.Struct):
    """The access log's fields, in this order (docs/operations.md); made positionally (a
    struct of 20 fields by keyword costs twice as much)."""

    ts: str
    request_id: str | None
    method: str
    route: str
    status: int
    model: str | None
    provider: str | None
    upstream_model: str | None
    attempts: int
    stream: bool
    input_tokens: int | None
    output_tokens: int | None
    cached_tokens: int | None
    cost_usd: float | None
    ttft_s: float | None
    duration_s: float
    overhead_s: float | None
    key: str | None
    error: str | None
    pid: int


_line_encoder = msgspec.json.Encoder()


def route_of(request: web.Request) -> str:
    resource = request.match_info.route.resource
    if resource is None:
        return OTHER_ROUTE
    return resource.canonical


def rejection_reason(err: GatewayError) -> str | None:
    """The `reason` of gateway_rejections_total for an error the gateway raised itself
    before any upstream; None for upstream failures (they are counted as such)."""
    by_code = _REJECTION_BY_CODE.get(err.code or "")
    if by_code is not None and isinstance(err, ClientError | NoUpstreamAvailable):
        return by_code
    if isinstance(err, ClientError):
        return _REJECTION_BY_STATUS.get(err.status, "bad_request")
    return None


def observe_failure(metrics: GatewayMetrics, record: RequestRecord, exc: BaseException) -> int:
    """What the request's handler raising `exc` tells: the error on `record`, a rejection
    counted when the gateway refused the request itself; the status the metrics and the
    access line give it (499 when the client left first)."""
    if isinstance(exc, GatewayError):
        record.error = exc.code or exc.type
        record.error_message = exc.message
        reason = rejection_reason(exc)
        if reason is not None:
            metrics.rejection_for(reason).inc()
        return exc.status
    if isinstance(exc, web.HTTPException):
        status = exc.status
        reason = _REJECTION_BY_STATUS.get(status)
        if reason is not None:
            metrics.rejection_for(reason).inc()
        record.error = reason
        return status
    if isinstance(exc, asyncio.CancelledError):
        record.error = "client_closed"
        return CLIENT_CLOSED
    return 500


def finish(
    metrics: GatewayMetrics,
    record: RequestRecord,
    status: int,
    request_id: str | None,
    method: str,
) -> tuple[float, float | None]:
    """Count the ended request and write its access line; its duration and time to first
    token."""
    duration, ttft = count_request(metrics, record, status)
    if access_log.isEnabledFor(logging.INFO):
        log_access_line(access_line(record, status, request_id, method, duration, ttft))
    return duration, ttft


def access_line(
    record: RequestRecord,
    status: int,
    request_id: str | None,
    method: str,
    duration: float,
    ttft: float | None,
) -> str:
    """The JSON access line of one ended request (docs/operations.md lists the fields)."""
    overhead = record.overhead_s
    line = AccessLine(
        iso_time(time.time()),
        request_id,
        method,
        record.route,
        status,
        record.model,
        record.provider,
        record.upstream_model,
        record.attempts,
        record.stream,
        record.input_tokens,
        record.output_tokens,
        record.cached_tokens,
        record.cost_usd,
        None if ttft is None else round(ttft, 6),
        round(duration, 6),
        None if overhead is None else round(overhead, 6),
        record.key,
        record.error,
        _PID,
    )
    return _line_encoder.encode(line).decode()


def count_request(
    metrics: GatewayMetrics, record: RequestRecord, status: int
) -> tuple[float, float | None]:
    """The request metrics of one ended request; its duration and time to first token."""
    duration = time.perf_counter() - record.received
    series = metrics.request_series(
        record.route, metrics.model_label(record.model), record.provider or NO_PROVIDER
    )
    series.count(record.failed_status or status)
    series.observe_duration(duration)
    ttft = record.first_token_at - record.received if record.first_token_at else None
    if ttft is not None:
        series.observe_ttft(ttft)
    if record.overhead_s is not None:
        series.observe_overhead(record.overhead_s)
    if record.input_tokens is not None:
        series.add_usage(record.input_tokens, record.output_tokens or 0, record.cached_tokens or 0)
    if record.cost_usd is not None:
        series.add_cost(record.cost_usd)
    return duration, ttft


async def access_log_flusher(app: web.Application) -> AsyncIterator[None]:
    """An app cleanup context: writes the access log's batched lines every ACCESS_FLUSH_S,
    and what is left when the app stops."""

    async def flush_every() -> None:
        while True:
            await asyncio.sleep(ACCESS_FLUSH_S)
            flush_access_log()

    task = asyncio.create_task(flush_every(), name="access-log-flush")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        flush_access_log()
