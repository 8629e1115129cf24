"""Rendering errors for clients, and the one middleware around every request.

Every error leaves in the OpenAI shape `{"error": {"message", "type", "param", "code"}}`
with the status its class names, except on routes whose API has its own error shape: those
register a renderer for their path in `ERROR_SHAPES` (Anthropic Messages under
`/v1/messages`). aiohttp's own HTTP errors (unknown route, wrong method, body too large) are
rendered the same way. Nothing here ever puts a secret in a body.

`gateway_middleware` gives each request its id (the `x-request-id` of every answer), keeps
its `RequestRecord` (gateway/observability/access.py: the metrics and the access line, told
when the handler is done, before an error is rendered) and renders what the handler raised.
It is one middleware, not an error and an observing one: each layer is another coroutine and
a call through a partial on every request.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Mapping
from time import perf_counter
from typing import TYPE_CHECKING

from aiohttp import web
from aiohttp.typedefs import Middleware

from gateway.errors import BodyTooLarge
from gateway.errors import GatewayError
from gateway.errors import InternalError
from gateway.errors import MethodNotAllowed
from gateway.errors import NotFound
from gateway.errors import StoreUnanswered
from gateway.observability.access import RECORD
from gateway.observability.access import UNOBSERVED
from gateway.observability.access import RequestRecord
from gateway.observability.access import finish
from gateway.observability.access import observe_failure
from gateway.observability.access import route_of
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_log import UNLOGGED_PREFIXES
from gateway.server.observer_routes import TRACED_ROUTES
from gateway.server.state import REQUEST_ID
from gateway.server.state import STATE
from gateway.store.kv import StoreError
from gateway.stream.chat_outbound import error_body
from gateway.wire.openai_chat import encoder

if TYPE_CHECKING:
    from gateway.server.observers import Observers

log = logging.getLogger("gateway.server")
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
ErrorRenderer = Callable[[GatewayError], bytes]
# path prefix -> the JSON body of an error on routes under it (others: the OpenAI shape)
ERROR_SHAPES = web.AppKey("error_shapes", Mapping[str, ErrorRenderer])
_REQUEST_ID = re.compile(r"[A-Za-z0-9._:\-]{1,128}")


def openai_error(err: GatewayError) -> bytes:
    return encoder.encode(error_body(err))


def error_response(
    err: GatewayError, request_id: str | None = None, render: ErrorRenderer = openai_error
) -> web.Response:
    headers = dict(err.headers)
    if request_id:
        headers["x-request-id"] = request_id
    return web.Response(
        status=err.status, body=render(err), content_type="application/json", headers=headers
    )


def renderer_for(request: web.Request) -> ErrorRenderer:
    shapes = request.app.get(ERROR_SHAPES)
    if shapes:
        path = request.path
        for prefix, render in shapes.items():
            if path == prefix or path.startswith(prefix + "/"):
                return render
    return openai_error


def request_id_of(request: web.Request) -> str:
    """The client's `x-request-id` when it is a sane token, else a fresh one."""
    given = request.headers.get("x-request-id", "")
    if given and _REQUEST_ID.fullmatch(given):
        return given
    return request.app[STATE].new_request_id()


def _from_http_exception(exc: web.HTTPException, request: web.Request) -> GatewayError:
    if isinstance(exc, web.HTTPRequestEntityTooLarge):
        return BodyTooLarge(
            f"Request body is larger than the limit of {request.app._client_max_size} bytes"
        )
    if isinstance(exc, web.HTTPMethodNotAllowed):
        return MethodNotAllowed(f"Method {request.method} is not allowed on {request.path}")
    if isinstance(exc, web.HTTPNotFound):
        return NotFound(f"Unknown route {request.method} {request.path}")
    err = GatewayError(exc.reason or "HTTP error")
    err.status, err.type = exc.status, "invalid_request_error"
    return err


def gateway_middleware(metrics: GatewayMetrics, observers: Observers | None = None) -> Middleware:
    """The application's middleware (see the module docstring). `observers`: the request log
    and tracing, when either is configured (None: neither runs per request)."""

    def ended(request: web.Request, record: RequestRecord, status: int) -> None:
        request_id = request[REQUEST_ID]
        duration, ttft = finish(metrics, record, status, request_id, request.method)
        if record.kept and observers is not None:
            observers.ended(request, record, status, duration, ttft)

    @web.middleware
    async def serve(request: web.Request, handler: Handler) -> web.StreamResponse:
        request_id = request_id_of(request)
        request[REQUEST_ID] = request_id
        route = route_of(request)
        record: RequestRecord | None = None
        if route not in UNOBSERVED:
            record = request[RECORD] = RequestRecord(perf_counter(), route)
            if observers is not None and not route.startswith(UNLOGGED_PREFIXES):
                record.kept = True
                if observers.request_log is not None:  # its attempts: the log's alone
                    record.journal = []
                if observers.tracing is not None and route in TRACED_ROUTES:
                    record.trace = observers.tracing.start_request(
                        request.headers, route, request.method
                    )
        try:
            response = await handler(request)
        except Exception as exc:
            rendered = error_answer(exc, request, request_id)
            if record is not None:
                status = observe_failure(metrics, record, exc)
                if rendered is not None and not isinstance(exc, GatewayError | web.HTTPException):
                    # a store error (503) or a bug (500): counted as what the client got
                    status = rendered.status
                    record.error = "store_unavailable" if status == 503 else "internal_error"
                ended(request, record, status)
            if rendered is None:
                raise
            return rendered
        except BaseException as exc:  # the client left (CancelledError), or the process ends
            if record is not None:
                ended(request, record, observe_failure(metrics, record, exc))
            raise
        if record is not None:
            ended(request, record, response.status)
        if not response.prepared:
            response.headers["x-request-id"] = request_id
        return response

    return serve


def error_answer(exc: Exception, request: web.Request, request_id: str) -> web.Response | None:
    """The answer to a handler's `exc`; None for an HTTP exception that is no error (a
    redirect), which aiohttp sends itself."""
    if isinstance(exc, GatewayError):
        return error_response(exc, request_id, renderer_for(request))
    if isinstance(exc, StoreError):
        # a handler that needed the store and did not say more: fail closed, 503
        log.warning(
            "store error in %s %s (request %s): %s",
            request.method,
            request.path,
            request_id,
            type(exc).__name__,
        )
        unanswered = StoreUnanswered("the gateway's store did not answer; try again shortly")
        unanswered.headers["Retry-After"] = "1"
        return error_response(unanswered, request_id, renderer_for(request))
    if isinstance(exc, web.HTTPException):
        if exc.status < 400:
            return None
        http_err = _from_http_exception(exc, request)
        return error_response(http_err, request_id, renderer_for(request))
    log.error(
        "unhandled error in %s %s (request %s)",
        request.method,
        request.path,
        request_id,
        exc_info=exc,
    )
    return error_response(InternalError("internal error"), request_id, renderer_for(request))
