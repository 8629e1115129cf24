"""The stream toward the client: held back until the commit point, then written with
backpressure, ended in one write.

Owned by one StreamActor. Headers are buffered by aiohttp and leave with the first body
bytes; a failed write to a client that left raises `ClientGone`.

A client that stops reading: while the connection's send buffer has room a write returns at
once (the normal case costs two comparisons, no timer). A write that could fill it first
waits for the client to drain it, and all the waiting since the client fell behind is
bounded by `write_timeout_s` (`server.client_write_timeout_s`); past it the connection is
aborted and `ClientTooSlow` raised, so the actor ends, the upstream is aborted and what is
buffered for this client stays below the transport's high-water mark plus one write.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from aiohttp.http_writer import StreamWriter

from gateway.framing.sse import encode_comment
from gateway.stream.deadlines import Deadlines

KEEPALIVE = encode_comment("keep-alive")


def failover_comment(provider: str, attempts: int) -> bytes:
    """The SSE comment before the answer of an attempt that took over a committed stream."""
    name = provider.replace("\n", " ").replace("\r", " ")
    return encode_comment(f"gateway-failover provider={name} attempts={attempts}")


def recovered_comment(provider: str, attempts: int) -> bytes:
    """The SSE comment before the continuation of an answer that broke after content."""
    name = provider.replace("\n", " ").replace("\r", " ")
    return encode_comment(f"gateway-recovered attempts={attempts} provider={name}")


_CLIENT_GONE = (ConnectionResetError, aiohttp.ClientConnectionResetError)
SSE_HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # nginx and friends must not buffer a stream
}


class _SSEResponse(web.StreamResponse):
    # aiohttp then sends the headers with the first body bytes: one write, not two.
    _send_headers_immediately = False


DEFAULT_HIGH_WATER = 65536  # asyncio's and uvloop's default, for a transport that hides it
FRAMING_SLACK = 32  # what chunked encoding adds around one write
HEAD_SLACK = 16384  # the status line and headers, which leave with the first write
_COPY_BELOW = 16384  # a chunk this small is framed by copying it: cheaper than three buffers


class ClientGone(Exception):
    """The client closed its connection; nothing more can be sent."""


class ClientTooSlow(ClientGone):
    """The client read nothing for `write_timeout_s` while a write waited: cut off."""


class ClientStream:
    def __init__(
        self, http: web.Request, loop: asyncio.AbstractEventLoop, write_timeout_s: float = 30.0
    ) -> None:
        self._http = http
        self._loop = loop
        self.write_timeout_s = write_timeout_s
        self.too_slow = False
        self._high_water = DEFAULT_HIGH_WATER
        self._slack = FRAMING_SLACK + HEAD_SLACK  # what the next write adds to its data
        # loop time since which writes have waited for the client; None: it keeps up. Kept
        # across writes interrupted by the actor's timer, so the bound is not restarted.
        self._behind_since: float | None = None
        # Set by the actor for each attempt, so they are true at the commit point. (Not a
        # callback into the actor: that would be a reference cycle per request, and cycles
        # are freed only by the garbage collector's pauses.)
        self.headers: dict[str, str] = {}
        self.committed = False
        # an upstream's bytes reached the client (not only headers and keep-alives): until
        # then a committed stream may still fail over (docs/routing.md, "Failover")
        self.answered = False
        self.pending: list[bytes] = []
        self.response: web.StreamResponse | None = None
        self.deadlines: Deadlines | None = None  # the read loop's, told about each write
        self.first_output_at: float | None = None
        self.keepalive_bytes = KEEPALIVE  # the inbound API's own (Anthropic: a ping event)
        self._direct: asyncio.Transport | None = None  # see write()
        self._protocol = http.protocol

    async def deliver(self, out: list[bytes], output_seen: bool, last: bool = False) -> None:
        """Bytes of one upstream read: held until the first output, then written at once.
        `last`: the upstream's end is here too, so they wait for the tail and leave with it
        in one write (a stream that commits here still does, and its headers wait too)."""
        if self.committed:
            if last:
                self.pending.extend(out)
                return
            await self.write(b"".join(out) if len(out) > 1 else out[0])
            return
        self.pending.extend(out)
        if output_seen:
            self.first_output_at = self._loop.time()
            if last:
                await self._start()
            else:
                await self.commit()

    async def commit(self) -> None:
        """Send the status line, the headers and whatever was held back, in one write; with
        nothing held back (commit_after_s passed) a keep-alive comment carries the headers."""
        await self._start()
        pending, self.pending = self.pending, []
        data = b"".join(pending) if pending else self.keepalive_bytes
        await self.write(data, progress=bool(pending))

    async def flush(self) -> None:
        """Write what is held back now (a committed stream that goes on elsewhere)."""
        if self.pending:
            pending, self.pending = self.pending, []
            await self.write(b"".join(pending))

    async def keepalive(self) -> None:
        await self.write(self.keepalive_bytes, progress=False)

    async def write(self, data: bytes, *, progress: bool = True) -> None:
        """Write with backpressure. A write that completes counts as progress for the idle
        deadline (a client slow to read must not look like a silent upstream); a keep-alive
        (`progress=False`) does not.

        Once aiohttp has sent the head (the first write), a write that fits under the
        high-water mark goes to the transport here, framed as one HTTP chunk in one
        `transport.write`: aiohttp's `StreamResponse.write` costs two more coroutines and a
        three-buffer `writelines` per chunk, for nothing a stream needs (no compression, no
        length to count, and a write with room never waits)."""
        if self._direct is not None and self._has_room(len(data)):
            self.write_now(data, progress=progress)
            return
        response = self.response
        assert response is not None
        try:
            if self._has_room(len(data)):
                await response.write(data)  # stays under the high-water mark: cannot wait
            else:
                await self._write_bounded(response, data, eof=False)
            self._go_direct(response)
        except _CLIENT_GONE:
            raise ClientGone from None
        self._wrote(progress)

    @property
    def writes_directly(self) -> bool:
        """The head is out and the body's chunks go to the transport (see `write`)."""
        return self._direct is not None

    def can_write_now(self, size: int) -> bool:
        """Whether `write_now` may take `size` bytes: the head is out, the body is chunked
        and the transport has room (it may then take one write more than `size`: the bound
        stays the high-water mark plus one write)."""
        return self._direct is not None and self._has_room(size)

    def write_now(self, data: bytes, *, progress: bool = True) -> None:
        """`write` without waiting, once `can_write_now` said so: one framed HTTP chunk in
        one `transport.write` (called from the upstream connection's relay, outside any
        coroutine)."""
        direct = self._direct
        assert direct is not None
        if direct.is_closing():
            raise ClientGone
        try:
            if not data:
                pass  # an empty chunk would end the body (aiohttp skips it too)
            elif len(data) < _COPY_BELOW:
                direct.write(b"%x\r\n%b\r\n" % (len(data), data))
            else:  # a large write is not copied into a framed one
                direct.writelines((b"%x\r\n" % len(data), data, b"\r\n"))
        except _CLIENT_GONE:
            raise ClientGone from None
        self._wrote(progress)

    def _wrote(self, progress: bool) -> None:
        self._slack = FRAMING_SLACK
        if progress:
            self.answered = True
        deadlines = self.deadlines
        if deadlines is not None:
            deadlines.last_write = now = self._loop.time()
            if progress:
                deadlines.last_upstream = now

    def _go_direct(self, response: web.StreamResponse) -> None:
        """After aiohttp's first write (the head went with it), write chunks directly when
        the body is chunked (HTTP/1.1; an HTTP/1.0 client's body stays aiohttp's)."""
        writer = response._payload_writer
        if self._direct is None and isinstance(writer, StreamWriter) and writer.chunked:
            self._direct = self._http.transport

    async def end(self, data: bytes) -> web.StreamResponse:
        """The last bytes (with anything held back, and the headers if nothing was sent
        yet) and the end of the response, in one write. A client that left is ignored."""
        try:
            response = self.response if self.committed else await self._start()
            assert response is not None
            if self.pending:
                self.pending.append(data)
                data = b"".join(self.pending)
                self.pending = []
            if self._has_room(len(data)):
                await response.write_eof(data)  # stays under the high-water mark: cannot wait
            else:
                await self._write_bounded(response, data, eof=True)
        except (ClientGone, *_CLIENT_GONE):
            pass
        assert self.response is not None
        return self.response

    def _has_room(self, size: int) -> bool:
        """Whether `size` more bytes fit under the transport's high-water mark, so a write
        of them returns without waiting for the client."""
        transport = self._protocol.transport
        return (
            self._behind_since is None
            and transport is not None
            and not self._protocol.writing_paused
            and transport.get_write_buffer_size() + size + self._slack <= self._high_water
        )

    async def _write_bounded(self, response: web.StreamResponse, data: bytes, *, eof: bool) -> None:
        """Wait for the client to drain what is buffered, then write, all within what is
        left of `write_timeout_s` since the client fell behind."""
        if self._behind_since is None:
            self._behind_since = self._loop.time()
        try:
            async with asyncio.timeout_at(self._behind_since + self.write_timeout_s):
                await self._http.writer.drain()
                if eof:
                    await response.write_eof(data)
                else:
                    await response.write(data)
        except TimeoutError:
            self.too_slow = True
            transport = self._http.transport
            if transport is not None:
                transport.abort()  # drops what is buffered; the connection is unusable now
            raise ClientTooSlow from None
        self._behind_since = None

    async def _start(self) -> web.StreamResponse:
        self.committed = True
        transport = self._http.transport
        if transport is not None:
            self._high_water = transport.get_write_buffer_limits()[1]
        response = self.response = _SSEResponse(status=200, headers={**SSE_HEADERS, **self.headers})
        try:
            await response.prepare(self._http)
        except _CLIENT_GONE:
            raise ClientGone from None
        return response
