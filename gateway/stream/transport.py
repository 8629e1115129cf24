"""Opening an upstream: HTTP through aiohttp's pooled client, or the mock's playback.

This is the boundary where aiohttp's exceptions become the gateway's `UpstreamError`s; no
aiohttp exception escapes it. The actor reads the body with `read()` and ends it with
`release()` (whole body read: the connection goes back to the pool) or `abort()` (anything
else: the connection is closed, so the upstream stops generating and billing).
"""

from __future__ import annotations

import asyncio
from typing import Protocol

import aiohttp

from gateway.errors import UpstreamConnectError, UpstreamError, UpstreamTimeout
from gateway.providers.base import ProviderAdapter, UpstreamRequest

ERROR_BODY_LIMIT = 1 << 20


class UpstreamBody(Protocol):
    async def read(self) -> bytes:
        """The next bytes of the body; b"" at its end."""
        ...

    def release(self) -> None: ...

    def abort(self) -> None: ...


class HttpBody:
    __slots__ = ("_content", "_response")

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self._response = response
        self._content = response.content

    async def read(self) -> bytes:
        try:
            return await self._content.readany()
        except aiohttp.ClientPayloadError as exc:
            raise UpstreamConnectError(f"upstream broke off the body: {exc}") from None
        except aiohttp.ClientError as exc:
            raise UpstreamConnectError(f"upstream connection failed: {exc}") from None

    def release(self) -> None:
        self._response.release()

    def abort(self) -> None:
        self._response.close()


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

    def release(self) -> None:
        self._next = len(self._frames)

    def abort(self) -> None:
        self._next = len(self._frames)


async def open_upstream(
    session: aiohttp.ClientSession,
    adapter: ProviderAdapter,
    request: UpstreamRequest,
    *,
    connect_s: float,
) -> UpstreamBody:
    """Send `request`; return its body once the upstream answered with a success status.

    The caller bounds the wait for the answer (first byte) with its own deadline. An error
    status is read (bounded) and mapped by the adapter."""
    if request.playback is not None:
        return PlaybackBody(request.playback, request.playback_delay_s)
    try:
        response = await session.request(
            request.method,
            request.url,
            data=request.body,
            headers=request.headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_s, connect=None),
            allow_redirects=False,
        )
    except aiohttp.ClientConnectorError as exc:
        raise UpstreamConnectError(f"cannot connect to upstream: {exc.os_error}") from None
    except aiohttp.ServerTimeoutError:
        raise UpstreamTimeout(f"connecting to the upstream took over {connect_s}s") from None
    except aiohttp.ClientError as exc:
        raise UpstreamConnectError(f"upstream connection failed: {exc}") from None
    if response.status >= 400:
        raise await _error_answer(adapter, response)
    return HttpBody(response)


async def _error_answer(
    adapter: ProviderAdapter, response: aiohttp.ClientResponse
) -> UpstreamError:
    parts: list[bytes] = []
    size = 0
    try:
        while size < ERROR_BODY_LIMIT:
            part = await response.content.read(ERROR_BODY_LIMIT - size)
            if not part:
                break
            parts.append(part)
            size += len(part)
    except aiohttp.ClientError:
        pass  # the status alone still says what happened
    finally:
        response.close()
    body = b"".join(parts)
    return adapter.error_from_response(response.status, body, response.headers)
