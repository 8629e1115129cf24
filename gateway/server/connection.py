"""The HTTP connection's own limits, before any handler runs (docs/api.md, "Limits").

Headers: aiohttp refuses a header line over `max_header_bytes` while parsing, before any
handler runs; `JsonErrorServer` makes that refusal (and any other unparsable request) an
answer in the OpenAI error shape, 431 for headers too large, instead of aiohttp's plain text.

Slow requests (`server.client_header_timeout_s`, `server.client_body_timeout_s`): both are
total deadlines, so a client that trickles a byte now and then cannot hold a connection open
for longer than they allow. The head's clock starts when the connection is accepted, or at the
first byte of the next request on a kept-alive one (an idle kept-alive connection is aiohttp's
keep-alive timeout's business), and stops when the head is parsed; on expiry the client gets a
408 in the OpenAI shape with `Connection: close` (nothing, when it has sent no byte) and the
connection is closed. The body's deadline is set when a head is parsed whose body has not all
arrived with it; `request_body.py` reads the rest within it and answers 408 otherwise. A body
that came with its head costs no timer.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_exceptions import LineTooLong
from aiohttp.streams import EMPTY_PAYLOAD
from aiohttp.streams import StreamReader
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from gateway.config import LimitsConfig
from gateway.config import ServerConfig
from gateway.errors import BadRequest
from gateway.errors import GatewayError
from gateway.errors import RequestTimeout
from gateway.server.errors import openai_error

log = logging.getLogger("gateway.server")


class HeadersTooLarge(GatewayError):
    status = 431
    type = "invalid_request_error"
    code = "request_header_fields_too_large"


def header_handler_args(limits: LimitsConfig) -> dict[str, Any]:
    """aiohttp's request handler arguments for the header limit: one request or header
    line (name and value) of at most `max_header_bytes`."""
    return {"max_line_size": limits.max_header_bytes, "max_field_size": limits.max_header_bytes}


def handler_args(
    server: ServerConfig, on_head_timeout: Callable[[], None] | None = None
) -> dict[str, Any]:
    """The arguments of a `GatewayRequestHandler`: the header limit and the deadlines of a
    request's head and body; `on_head_timeout` is told of each connection the head's
    deadline closes."""
    return {
        **header_handler_args(server.limits),
        "head_timeout_s": server.client_header_timeout_s,
        "body_timeout_s": server.client_body_timeout_s,
        "on_head_timeout": on_head_timeout,
    }


def _head_timeout_answer(timeout_s: float) -> bytes:
    err = RequestTimeout(f"The request head did not arrive within {timeout_s:g}s")
    body = openai_error(err)
    head = (
        "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


def _host_of(peer: object) -> object:
    return peer[0] if isinstance(peer, tuple) else peer


class GatewayRequestHandler(RequestHandler):
    """aiohttp's connection handler, with unparsable requests answered in the OpenAI error
    shape and the deadlines of a request's head and body (see the module docstring)."""

    __slots__ = (
        "_body_timeout_s",
        "_head_bytes",
        "_head_since",
        "_head_timeout_s",
        "_head_timer",
        "_last_payload",
        "_on_head_timeout",
        "body_deadline",
    )

    def __init__(
        self,
        manager: web.Server,
        *,
        loop: asyncio.AbstractEventLoop,
        head_timeout_s: float = 0.0,  # 0: no deadline (aiohttp's own behaviour)
        body_timeout_s: float = 0.0,
        on_head_timeout: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(manager, loop=loop, **kwargs)
        self._head_timeout_s = head_timeout_s
        self._body_timeout_s = body_timeout_s
        self._on_head_timeout = on_head_timeout
        self._head_since: float | None = None  # loop time the current head's clock started
        self._head_bytes = False  # whether any byte of the current head has arrived
        self._head_timer: asyncio.TimerHandle | None = None
        # the body of the last request parsed: while it is incomplete, bytes are its body
        self._last_payload: StreamReader = EMPTY_PAYLOAD
        # loop time by which the body of the request being read must be complete; None when
        # it came whole with its head (only the last parsed head's body can be incomplete)
        self.body_deadline: float | None = None

    @property
    def body_timeout_s(self) -> float:
        return self._body_timeout_s

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._head_timeout_s > 0:
            # a connection that never sends a byte is held to the head's deadline too
            loop = self._loop
            self._head_since = loop.time()
            self._head_timer = loop.call_at(
                self._head_since + self._head_timeout_s, self._head_expired
            )

    def data_received(self, data: bytes) -> None:
        if self._force_close or self._close:
            return
        if data and self._head_timeout_s > 0 and self._last_payload.is_eof():
            # not inside a body: these bytes begin or continue a request head
            if self._head_since is None:
                self._head_since = self._loop.time()
            self._head_bytes = True
        parsed = self._request_count
        super().data_received(data)
        if self._request_count != parsed:
            self._head_parsed()
        elif self._head_since is not None and self._head_timer is None and not self._force_close:
            # only a head that did not come whole in one read pays for a timer
            self._head_timer = self._loop.call_at(
                self._head_since + self._head_timeout_s, self._head_expired
            )

    def _head_parsed(self) -> None:
        # one read may hold several pipelined requests; every one before the last is whole
        payload = self._messages[-1][1]
        self._last_payload = payload
        self._head_since = None
        self._head_bytes = False
        timer = self._head_timer
        if timer is not None:
            timer.cancel()
            self._head_timer = None
        if payload.is_eof():
            self.body_deadline = None
        elif self._body_timeout_s > 0:
            self.body_deadline = self._loop.time() + self._body_timeout_s

    def _head_expired(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or self._force_close or self._close:
            return
        host = _host_of(self.peername)
        if self._on_head_timeout is not None:
            self._on_head_timeout()
        if self._request_in_progress or self._messages:
            # a pipelined head behind a request being answered: that answer still goes out,
            # then the connection closes; the slow head gets no answer of its own
            log.warning(
                "closing a connection from %s after its answer: the next request head did "
                "not arrive within %gs",
                host,
                self._head_timeout_s,
            )
            self.close()
            return
        if self._head_bytes:
            log.warning(
                "closed a connection from %s: the request head did not arrive within %gs (408)",
                host,
                self._head_timeout_s,
            )
            transport.write(_head_timeout_answer(self._head_timeout_s))
        else:
            log.warning(
                "closed a connection from %s: no request within %gs of connecting",
                host,
                self._head_timeout_s,
            )
        self.force_close()  # the transport sends what was written before it closes

    def close_after_answer(self) -> None:
        """Close the connection once the answer being made has been written, without
        reading the rest of the body first (aiohttp's lingering read would give a slow
        client more time)."""
        self._lingering_time = 0.0
        self.close()

    def connection_lost(self, exc: BaseException | None) -> None:
        timer = self._head_timer
        if timer is not None:
            timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if status >= 500 or not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        # The request could not be parsed: no route, so no route-specific shape.
        if isinstance(exc, LineTooLong):
            err: GatewayError = HeadersTooLarge(
                f"The request line or a header is larger than the limit of {exc.args[1]} bytes"
            )
        else:
            err = BadRequest(f"Malformed HTTP request: {exc.message}", code="bad_http_request")
        log.warning("refused an unparsable request from %s: %s", request.remote, err.message)
        response = web.Response(
            status=err.status, body=openai_error(err), content_type="application/json"
        )
        response.force_close()  # the parser's state is lost: nothing more on this connection
        return response


class JsonErrorServer(web.Server):
    """aiohttp's low-level server with `GatewayRequestHandler`s for its connections."""

    def __call__(self) -> RequestHandler:
        kwargs: dict[str, Any] = self._kwargs
        return GatewayRequestHandler(self, loop=self._loop, **kwargs)


class GatewayRunner(web.AppRunner):
    """An AppRunner whose server is a `JsonErrorServer`."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        # AppRunner builds its Server inside the Application; only the connection handler
        # it makes differs, so the instance takes the subclass (same layout, no new state).
        server.__class__ = JsonErrorServer
        return server
