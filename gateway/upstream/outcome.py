"""How an attempt ended, told to key health and metrics; and what the client is told when
every attempt failed before the commit point.

The client: 429 if every attempt was rate limited, 504 if the last failure was a timeout, the
upstream's own 4xx (message, type, param, code) when it refused the request itself, and
502 otherwise. (503, nothing could be tried, is raised by the router or the actor.)

Key health: a 429 cools the key down for that model, 401/403 takes it out of rotation, a
key whose credential could not be had (`CredentialsUnavailable`: a cloud identity's token
endpoint down) has its circuit opened at once, a client-caused 4xx shows the key is fine,
anything else counts toward its circuit breaker.
"""

from __future__ import annotations

import time

from gateway.errors import GatewayError
from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.errors import UpstreamTimeout
from gateway.routing.router import Attempt
from gateway.upstream.credentials import CredentialsUnavailable
from gateway.wire.openai_chat import Usage


def error_kind(err: UpstreamError) -> str:
    """A bounded word for what went wrong (the `kind` of gateway_upstream_errors_total, and
    what key health makes of it): a timeout's own code (connect_timeout, first_byte_timeout,
    idle_timeout, upstream_timeout), rate_limited, auth, http_4xx, http_5xx, credentials,
    connect, stream_error, protocol."""
    status = err.upstream_status
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "auth"
    if isinstance(err, UpstreamTimeout):
        return err.code or "upstream_timeout"
    if isinstance(err, UpstreamStreamError):
        return "stream_error"
    if status is not None:
        return "http_4xx" if status < 500 else "http_5xx"
    if isinstance(err, CredentialsUnavailable):
        return "credentials"
    if isinstance(err, UpstreamConnectError):
        return "connect"
    if isinstance(err, UpstreamProtocolError):
        return "protocol"
    return "upstream_error"


def report_failure(attempt: Attempt, ticket: int, err: UpstreamError) -> None:
    health, now = attempt.health, time.monotonic()
    kind = error_kind(err)
    attempt.metrics.upstream_error_for(attempt.provider.name, kind).inc()
    if kind == "rate_limited":
        health.rate_limited(ticket, now, attempt.model, err.retry_after_s)
    elif kind == "auth":
        health.auth_failed(ticket, now)
    elif kind == "credentials":
        health.unusable(ticket, now)
    elif kind == "http_4xx" and not err.retryable:
        health.answered(ticket)  # the client's request was refused: the key is fine
    else:
        health.server_failed(ticket, now)


def report_success(
    attempt: Attempt, ticket: int, ttft_s: float | None, usage: Usage | None
) -> None:
    tokens = 0
    if usage is not None:
        tokens = usage.total_tokens or usage.prompt_tokens + usage.completion_tokens
    attempt.health.succeeded(ticket, ttft_s, tokens, time.monotonic())


def count_move(previous: Attempt, attempt: Attempt, client_model: str) -> None:
    """An attempt after another: a retry on another key of the same target, or a failover
    to another target."""
    metrics = attempt.metrics
    if previous.provider is attempt.provider and previous.model == attempt.model:
        metrics.retry_for(attempt.provider.name).inc()
    else:
        metrics.failover_for(client_model).inc()


def final_error(errors: list[UpstreamError]) -> GatewayError:
    last = errors[-1]
    if all(e.upstream_status == 429 for e in errors):
        err = UpstreamError(
            f"every upstream attempt was rate limited ({len(errors)} tried): {last.message}",
            code="rate_limit_exceeded",
        )
        err.status, err.type = 429, "rate_limit_error"
        return err
    if isinstance(last, UpstreamTimeout):
        return last
    status = last.upstream_status
    if not last.retryable and status is not None and 400 <= status < 500:
        last.status = status
        return last
    last.status = 502
    return last
