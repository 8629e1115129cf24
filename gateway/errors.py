"""Every error the gateway raises on purpose, organised by what the caller does next.

    GatewayError
    ├── ClientError              4xx: the request is wrong; tell the client, never retry
    │   ├── BadRequest             400 malformed JSON, wrong field types, bad values
    │   ├── AuthenticationFailed   401 no key or a wrong key
    │   ├── PermissionDenied       403 the key may not use this model
    │   ├── NotFound               404 unknown model or route
    │   ├── MethodNotAllowed       405
    │   ├── RequestTimeout         408 the request head or body arrived too slowly
    │   ├── BodyTooLarge           413 over server.max_body_bytes
    │   └── RateLimited            429 rpm/tpm or budget (code budget_exceeded)
    ├── UpstreamError            one upstream attempt failed; `retryable` says whether another
    │   │                        key or target may be tried (only before the commit point)
    │   ├── UpstreamTimeout        connect, first byte, idle or total deadline passed
    │   ├── UpstreamConnectError   could not reach the upstream, or it hung up
    │   ├── UpstreamStatusError    the upstream answered with an HTTP error status
    │   ├── UpstreamStreamError    the upstream put an error event inside a 200 stream
    │   └── UpstreamProtocolError  the upstream's bytes are not the wire format it promised
    │       └── FramingError         an SSE/NDJSON frame is malformed or over its size bound
    ├── NoUpstreamAvailable      503: every target or key is unavailable, or none was tried
    │   └── UpstreamsRateLimited   429: every key that could serve it is resting after rate limits
    ├── StoreUnanswered          503: the store (responses, budgets) did not answer: fail closed
    └── InternalError            500: a bug of ours; logged with the request id

This module is pure data: the sans-IO core raises these, the server renders them
(server/errors.py) in the shape of each inbound API.
"""

from __future__ import annotations


class GatewayError(Exception):
    """Base of every error the gateway raises on purpose."""

    status: int = 500
    type: str = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.message = message
        self.param = param
        self.headers: dict[str, str] = {}  # extra response headers (x-gateway-attempts)
        if code is not None:
            self.code = code


class ClientError(GatewayError):
    """The client's request is wrong; answer it and do not retry."""

    status = 400
    type = "invalid_request_error"


class BadRequest(ClientError):
    status = 400


class AuthenticationFailed(ClientError):
    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class PermissionDenied(ClientError):
    status = 403
    type = "permission_error"
    code = "model_not_allowed"


class NotFound(ClientError):
    status = 404
    code = "not_found"


class UnknownModel(NotFound):
    code = "model_not_found"


class MethodNotAllowed(ClientError):
    status = 405
    code = "method_not_allowed"


class RequestTimeout(ClientError):
    status = 408
    code = "request_timeout"


class BodyTooLarge(ClientError):
    status = 413
    code = "request_too_large"


class RateLimited(ClientError):
    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class UpstreamError(GatewayError):
    """One upstream attempt failed.

    `retryable` is true when another key or target may succeed: timeouts, connection
    failures, 401/403/408/409/429 and 5xx answers, broken streams. Only errors raised
    before the commit point can be retried.
    """

    status = 502
    type = "upstream_error"
    code = "upstream_error"
    retryable = True
    # worth one more try on the same target (routing.retries_per_target); None: decided by
    # `upstream_status` (a 5xx or a 429)
    transient: bool | None = None
    # the request is longer than the model's context window: a larger one may take it
    # (routing: context-window fallbacks); set by the provider's error mapping
    context_exceeded = False

    def __init__(
        self,
        message: str,
        *,
        retryable: bool | None = None,
        upstream_status: int | None = None,
        param: str | None = None,
        code: str | None = None,
        transient: bool | None = None,
    ):
        super().__init__(message, param=param, code=code)
        if retryable is not None:
            self.retryable = retryable
        if transient is not None:
            self.transient = transient
        self.upstream_status = upstream_status
        # seconds the upstream asked us to wait (Retry-After and kin), read from its headers
        self.retry_after_s: float | None = None


class UpstreamTimeout(UpstreamError):
    status = 504
    type = "timeout_error"
    code = "upstream_timeout"


class UpstreamConnectError(UpstreamError):
    code = "upstream_unreachable"
    transient = True


class ProxyRefusedError(UpstreamConnectError):
    """The egress proxy refused with a 4xx (a wrong password, a host it will not reach):
    another target may do, the same one again will not."""

    transient = False


class UpstreamStatusError(UpstreamError):
    """The upstream answered with an HTTP error status; `upstream_status` holds it."""

    code = "upstream_status"


class UpstreamStreamError(UpstreamError):
    """An error event inside a 200 stream (`data: {"error": ...}`, Anthropic `event: error`)."""

    code = "upstream_stream_error"


class UpstreamProtocolError(UpstreamError):
    code = "upstream_protocol_error"


class FramingError(UpstreamProtocolError):
    """A frame of the upstream byte stream is malformed or larger than its bound."""


class NoUpstreamAvailable(GatewayError):
    status = 503
    type = "server_error"
    code = "no_upstream_available"


class UpstreamsRateLimited(NoUpstreamAvailable):
    """Nothing was tried because every key that could serve the request is cooling down
    after a 429 or is at its own rpm/tpm: the client should back off (`Retry-After`)."""

    status = 429
    type = "rate_limit_error"
    code = "rate_limit_exceeded"


class StoreUnanswered(GatewayError):
    """The shared store did not answer; the request is refused rather than served without
    the state it needs (a budget must never fail open)."""

    status = 503
    type = "server_error"
    code = "store_unavailable"


class InternalError(GatewayError):
    status = 500
    type = "server_error"
    code = "internal_error"
