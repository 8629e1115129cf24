"""One upstream HTTP/1.1 connection as an asyncio Protocol, and a response read through it.

The response is parsed by the sans-IO `framing.http1.ResponseParser` inside `data_received`
and its body handed to the actor as the bytes arrive, with flow control (reading pauses
while more than `HIGH_WATER` bytes are buffered). A response read to its end gives its
connection back to the pool (upstream/http_client.py); anything else closes it, so an
abandoned upstream stops generating.

A stream in full flow skips the buffer: the actor may set a `relay`, called from
`data_received` with each read's body bytes; when it takes them (it relays them to the
client at once), no future is resolved and no task woken for that read, which is most of
what a relayed chunk costs in Python. Whatever it does not take (the end of the body, a
client that cannot take more now) is buffered and read as before, in order.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import cast

from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamError
from gateway.framing.http1 import END
from gateway.framing.http1 import ResponseHead
from gateway.framing.http1 import ResponseParser

if TYPE_CHECKING:
    from gateway.upstream.http_client import HttpPool
    from gateway.upstream.http_client import PoolKey

HIGH_WATER = 1 << 20  # buffered body bytes at which reading pauses
_JOIN_BELOW = 65536  # a request body this small is joined to its head (one buffer, one copy)


class Http1Connection(asyncio.Protocol):
    """One upstream connection; carries one request at a time."""

    def __init__(self, pool: HttpPool, key: PoolKey) -> None:
        self._pool = pool
        self.key = key
        # made inside loop.create_connection; kept, since asking for the running loop costs
        # a getpid() system call, and every wait for the upstream needs it
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.parser = ResponseParser()
        self.closed = False
        self.idle_since = 0.0
        self.reused = False
        self._sent = False  # a request is on the wire
        self._head: ResponseHead | None = None
        self._head_error: Exception | None = None
        # a list, not a deque: a deque's first block is ~600 bytes, held by every stream
        self._body: list[bytes] = []
        self._buffered = 0
        self._paused = False
        self._eof = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None
        # Takes one read's body bytes while the body goes on (True: taken); what it raises
        # is raised to the reader instead of what the body would have given.
        self.relay: Callable[[bytes], bool] | None = None
        self._relay_error: Exception | None = None

    # --- asyncio callbacks ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass

    def data_received(self, data: bytes) -> None:
        try:
            events = self.parser.feed(data)
        except UpstreamError as err:
            self._fail(err)
            self.abort()
            return
        for event in events:
            if event.__class__ is bytes:
                self._body.append(event)
                self._buffered += len(event)
            elif event is END:
                self._eof = True
            else:
                self._head = event  # type: ignore[assignment]
        relay_wanted = self.relay is not None and not self._eof and self._error is None
        if relay_wanted and self._body and self._relayed():
            return
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def _relayed(self) -> bool:
        """Offer what is buffered (this read's bytes, after any the reader has not taken
        yet: the order holds) to the relay; True when nothing is left to wake the reader for."""
        assert self.relay is not None
        body = self._body
        data = body[0] if len(body) == 1 else b"".join(body)
        try:
            if not self.relay(data):
                return False
        except Exception as exc:  # the reader raises it, as it would a broken body
            self._relay_error = exc
            self.relay = None
            body.clear()
            self._buffered = 0
            return False
        body.clear()
        self._buffered = 0
        return True

    def eof_received(self) -> bool | None:
        return None  # close the transport: HTTP/1.1 has no half-closed use here

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        if self._eof or not self._sent:
            return
        if self._head is None:
            # Never resent: once its bytes were handed to the socket the request may have
            # reached the upstream (a kept-alive connection closed by the server as it
            # arrived looks the same as one the server read and then dropped). The failure
            # is an attempt like any other (docs/routing.md, "No invisible resends").
            kept = "a kept-alive connection" if self.reused else "the connection"
            self._head_error = UpstreamConnectError(
                f"the upstream closed {kept} before answering: {exc or 'EOF'}"
            )
            self._wake()
            return
        try:
            events = self.parser.close()
        except UpstreamError as err:
            self._fail(err)
            return
        if END in events:
            self._eof = True
        self._wake()

    # --- the request, as the actor sees it ---------------------------------------------------

    def send(self, head: bytes, body: bytes) -> None:
        """Write the request (its head and body); `head()` waits for the answer."""
        assert self.transport is not None
        self._sent = True
        if len(body) < _JOIN_BELOW:
            self.transport.write(head + body)
        else:
            # a large body (a long context) is not copied behind its head: one writev
            self.transport.writelines((head, body))

    async def head(self) -> ResponseHead:
        """The response head, once it arrived. Cancelling this wait loses nothing (the head
        is kept on the connection), so a caller's timer may wake it and it may wait again."""
        while True:
            if self._head is not None:
                return self._head
            if self._head_error is not None:
                raise self._head_error
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    async def read(self) -> bytes:
        """The body bytes received so far (waiting for some); b"" at the end of the body."""
        while True:
            if self._relay_error is not None:
                raise self._relay_error
            if self._body:
                body = self._body
                data = body[0] if len(body) == 1 else b"".join(body)
                body.clear()
                self._buffered = 0
                if self._paused and self.transport is not None:
                    self._paused = False
                    self.transport.resume_reading()
                return data
            if self._error is not None:
                raise self._error
            if self._eof:
                return b""
            self._waiter = self._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    @property
    def body_ended(self) -> bool:
        return self._eof and self._error is None

    def release(self) -> None:
        """The response was read to its end: keep the connection if the upstream allows."""
        head = self.parser.head
        if (
            self._eof
            and not self._body
            and not self.closed
            and head is not None
            and head.keep_alive
        ):
            self._reset()
            self._pool.put(self)
        else:
            self.abort()

    def abort(self) -> None:
        if self.transport is not None and not self.closed:
            self.closed = True
            self.transport.abort()

    def _reset(self) -> None:
        self.parser.reset()
        self._sent = False
        self._head = None
        self._head_error = None
        self._eof = False
        self._error = None
        self._body.clear()
        self._buffered = 0
        self._paused = False
        self.relay = None
        self._relay_error = None

    def _fail(self, err: UpstreamError) -> None:
        if self._head is None:
            self._head_error = err
        self._error = err
        self._wake()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class UpstreamResponse:
    """A response whose head arrived; its body is read through the connection."""

    __slots__ = ("connection", "head", "read")

    def __init__(self, connection: Http1Connection, head: ResponseHead) -> None:
        self.connection = connection
        self.head = head
        self.read = connection.read

    @property
    def status(self) -> int:
        return self.head.status

    @property
    def ended(self) -> bool:
        """The whole body arrived: reading what is left will not wait."""
        return self.connection.body_ended

    def release(self) -> None:
        self.connection.release()

    def abort(self) -> None:
        self.connection.abort()
