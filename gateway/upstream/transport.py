"""Opening an upstream: HTTP through the pooled client, or the mock's playback.

The actor reads the body with `read()` and ends it with `release()` (whole body read: the
connection goes back to the pool) or `abort()` (anything else: the connection is closed, so
the upstream stops generating and billing). An error answer's wait (`Retry-After` and kin) is
read here, where its headers are, and travels on the error as `retry_after_s`.

A request goes out on its provider's egress (`UpstreamRequest.egress`: its proxy and TLS
trust). A 407 to a plain-http request sent through a forward proxy is the proxy's, not the
upstream's: a connect failure of the attempt, like a refused CONNECT.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Protocol

from gateway.errors import ProxyRefusedError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.providers.base import ProviderAdapter
from gateway.providers.base import UpstreamRequest
from gateway.routing.retry_after import retry_after_s
from gateway.routing.router import Attempt
from gateway.upstream.http_client import HttpPool
from gateway.upstream.http_client import PendingResponse
from gateway.upstream.http_connection import UpstreamResponse

ERROR_BODY_LIMIT = 1 << 20


class UpstreamBody(Protocol):
    async def read(self) -> bytes:
        """The next bytes of the body; b"" at its end."""
        ...

    @property
    def ended(self) -> bool:
        """The rest of the body is here already: `read()` would not wait (for the last
        bytes or for the end)."""
        ...

    def release(self) -> None: ...

    def abort(self) -> None: ...


class PlaybackBody:
    """The mock's frames, one per read, `delay_s` apart."""

    __slots__ = ("_delay", "_frames", "_next")

    def __init__(self, frames: list[bytes], delay_s: float) -> None:
        self._frames = frames
        self._delay = delay_s
        self._next = 0

    async def read(self) -> bytes:
        if self._next >= len(self._frames):
            return b""
        if self._delay > 0 and self._next > 0:
            await asyncio.sleep(self._delay)
        frame = self._frames[self._next]
        self._next += 1  # only after the sleep: a cancelled read loses nothing
        return frame

    @property
    def ended(self) -> bool:
        return self._next >= len(self._frames)

    def release(self) -> None:
        self._next = len(self._frames)

    def abort(self) -> None:
        self._next = len(self._frames)


async def open_upstream(
    pool: HttpPool,
    adapter: ProviderAdapter,
    request: UpstreamRequest,
    *,
    connect_s: float,
) -> UpstreamBody:
    """Send `request`; return its body once the upstream answered with a success status.
    The caller bounds the wait with its own deadline; cancelling it abandons the request."""
    sent = await send_upstream(pool, request, connect_s=connect_s)
    if isinstance(sent, PlaybackBody):
        return sent
    try:
        return await answered(adapter, sent)
    except BaseException:
        sent.abort()
        raise


async def send_upstream(
    pool: HttpPool, request: UpstreamRequest, *, connect_s: float
) -> PendingResponse | PlaybackBody:
    """Send `request` (the mock's playback needs no sending); await `answered()` next."""
    if request.playback is not None:
        return PlaybackBody(request.playback, request.playback_delay_s)
    return await pool.send(
        request.url, request.headers, request.body, connect_s=connect_s, egress=request.egress
    )


async def answered(adapter: ProviderAdapter, pending: PendingResponse) -> UpstreamBody:
    """The body of a sent request once the upstream answered with a success status; an
    error status is read (bounded) and mapped by the adapter. Safe to cancel and call again."""
    response = await pending.response()
    if response.status == 407 and pending.proxy is not None:
        response.abort()
        raise ProxyRefusedError(
            f"proxy {pending.proxy.label} refused the request: HTTP 407 "
            "(proxy authentication required or wrong)"
        )
    if response.status >= 400:
        raise await _error_answer(adapter, response)
    return response


async def _error_answer(adapter: ProviderAdapter, response: UpstreamResponse) -> UpstreamError:
    parts: list[bytes] = []
    size = 0
    try:
        while size < ERROR_BODY_LIMIT:
            part = await response.read()
            if not part:
                break
            parts.append(part)
            size += len(part)
    except UpstreamError:
        pass  # the status alone still says what happened
    finally:
        response.abort()
    headers = response.head.headers
    err = adapter.error_from_response(response.status, b"".join(parts)[:ERROR_BODY_LIMIT], headers)
    if response.status == 429 or response.status >= 500:
        err.retry_after_s = retry_after_s(headers, time.time(), adapter.rate_limits)
    return err


UNARY_BODY_LIMIT = 64 << 20


async def read_all(body: UpstreamBody) -> bytes:
    """A whole (non-streamed) upstream body, bounded."""
    parts: list[bytes] = []
    size = 0
    while True:
        data = await body.read()
        if not parts and body.ended and len(data) <= UNARY_BODY_LIMIT:
            return data  # the whole body came in one read (the usual case)
        if not data:
            return b"".join(parts)
        size += len(data)
        if size > UNARY_BODY_LIMIT:
            raise UpstreamProtocolError("the upstream answer is larger than 64 MiB")
        parts.append(data)


async def fetch_all(
    pool: HttpPool, adapter: ProviderAdapter, request: UpstreamRequest, *, connect_s: float
) -> tuple[bytes, Mapping[str, str]]:
    """A whole non-streamed answer and its headers (embeddings, count_tokens); the caller
    bounds it with its deadline (cancelling it aborts the request)."""
    body = await open_upstream(pool, adapter, request, connect_s=connect_s)
    try:
        data = await read_all(body)
    except BaseException:
        body.abort()
        raise
    headers: Mapping[str, str] = body.head.headers if isinstance(body, UpstreamResponse) else {}
    body.release()
    return data, headers


def speaks(attempt: Attempt, api: str) -> bool:
    """Whether this attempt's upstream takes requests of the client's `api` as they are."""
    return api == attempt.api or api in attempt.adapter.native_apis
