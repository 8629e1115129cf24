"""The upstream HTTP/1.1 client: pooled keep-alive connections on asyncio Protocols.

Built for the gateway's one pattern (POST a body, stream the answer back) and for speed:
a request is one `transport.write` (a large body: one `writelines`, its bytes not
copied behind the head), the response is parsed by the sans-IO
`framing.http1.ResponseParser` inside `data_received`, and the body is handed to the actor
as the bytes arrive, with flow control (reading pauses while too much is buffered). A
response read to its end returns its connection to the pool; anything else closes it, so
an abandoned upstream stops generating. A kept-alive connection that turns out to be
closed before any byte of the answer is retried once on a fresh connection.

The OS-level errors of connecting and reading become `UpstreamError`s here.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
import time
from typing import cast
from urllib.parse import urlsplit

from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamTimeout
from gateway.framing.http1 import END
from gateway.framing.http1 import ResponseHead
from gateway.framing.http1 import ResponseParser
from gateway.framing.http1 import encode_request
from gateway.upstream.alarm import Alarm
from gateway.upstream.alarm import AlarmClock

HIGH_WATER = 1 << 20  # buffered body bytes at which reading pauses
IDLE_TTL_S = 30.0  # a pooled connection unused this long is closed rather than reused
MAX_IDLE_PER_HOST = 512
_JOIN_BELOW = 65536  # a request body this small is joined to its head (one buffer, one copy)
# Without Accept-Encoding a server may compress; the gateway forwards bytes, so it asks not to.
_DEFAULT_HEADERS = {"User-Agent": "gateway/0.1", "Accept-Encoding": "identity"}


def _with_defaults(headers: dict[str, str]) -> dict[str, str]:
    """`headers` plus the client's defaults for the names it does not set (any case)."""
    given = {name.lower() for name in headers}
    extra = {k: v for k, v in _DEFAULT_HEADERS.items() if k.lower() not in given}
    return {**extra, **headers} if extra else headers


class _Stale(Exception):
    """A reused connection was closed before any byte of the answer: safe to resend."""


class Http1Connection(asyncio.Protocol):
    """One upstream connection; carries one request at a time."""

    def __init__(self, pool: HttpPool, key: tuple[str, str, int]) -> None:
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
        self._body: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._paused = False
        self._eof = False
        self._error: UpstreamError | None = None
        self._waiter: asyncio.Future[None] | None = None

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
        if self._buffered > HIGH_WATER and not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool | None:
        return None  # close the transport: HTTP/1.1 has no half-closed use here

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._pool.forget(self)
        if self._eof or not self._sent:
            return
        if self._head is None:
            if self.reused and not self.parser.started:
                self._head_error = _Stale()
            else:
                self._head_error = UpstreamConnectError(
                    f"the upstream closed the connection: {exc or 'EOF'}"
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
            if self._body:
                body = self._body
                data = body.popleft() if len(body) == 1 else b"".join(body)
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


class PendingResponse:
    """A request on the wire whose answer has not arrived yet."""

    __slots__ = ("_body", "_connect_s", "_connection", "_head", "_pool")

    def __init__(
        self,
        pool: HttpPool,
        connection: Http1Connection,
        head: bytes,
        body: bytes,
        connect_s: float,
    ) -> None:
        self._pool = pool
        self._head = head
        self._body = body
        self._connect_s = connect_s
        self._connection = connection
        connection.send(head, body)

    async def response(self) -> UpstreamResponse:
        """The response once its head arrived. Cancelling this wait (a timer that wakes the
        caller) leaves the request running: call again to keep waiting."""
        while True:
            try:
                head = await self._connection.head()
            except _Stale:
                # The upstream cannot have seen it: send it again on a fresh connection
                # (which is never stale, so this happens at most once).
                self._connection = await self._pool._connect(self._connection.key, self._connect_s)
                self._connection.send(self._head, self._body)
                continue
            return UpstreamResponse(self._connection, head)

    def abort(self) -> None:
        self._connection.abort()


class HttpPool:
    """Idle keep-alive connections per (scheme, host, port); connects on demand."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[tuple[str, str, int], list[Http1Connection]] = {}
        self._ssl = ssl_context  # None: the system trust store, made on first https use
        self._heads: dict[tuple[object, ...], tuple[tuple[str, str, int], bytes, bytes]] = {}
        # the deadlines of the requests waiting on this pool's upstreams, under one timer
        self.clock = AlarmClock()

    async def request(
        self, url: str, headers: dict[str, str], body: bytes, *, connect_s: float
    ) -> UpstreamResponse:
        """POST `body` to `url`; returns once the response head arrived."""
        pending = await self.send(url, headers, body, connect_s=connect_s)
        try:
            return await pending.response()
        except BaseException:
            pending.abort()
            raise

    async def send(
        self, url: str, headers: dict[str, str], body: bytes, *, connect_s: float
    ) -> PendingResponse:
        """POST `body` to `url` (connecting if no idle connection is kept); the answer is
        awaited separately, so a caller may wake up meanwhile without giving it up."""
        key, head, tail = self._request_head(url, headers)
        request_head = b"%sContent-Length: %d\r\n%s" % (head, len(body), tail)
        connection = self._take(key) or await self._connect(key, connect_s)
        return PendingResponse(self, connection, request_head, body, connect_s)

    def put(self, connection: Http1Connection) -> None:
        idle = self._idle.setdefault(connection.key, [])
        if len(idle) >= MAX_IDLE_PER_HOST:
            connection.abort()
            return
        connection.idle_since = time.monotonic()
        connection.reused = True
        idle.append(connection)

    def forget(self, connection: Http1Connection) -> None:
        idle = self._idle.get(connection.key)
        if idle and connection in idle:
            idle.remove(connection)

    def close(self) -> None:
        for idle in self._idle.values():
            for connection in idle:
                connection.abort()
        self._idle.clear()

    def _take(self, key: tuple[str, str, int]) -> Http1Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            if not connection.closed and now - connection.idle_since < IDLE_TTL_S:
                return connection
            connection.abort()
        return None

    async def _connect(self, key: tuple[str, str, int], connect_s: float) -> Http1Connection:
        scheme, host, port = key
        loop = asyncio.get_running_loop()
        context = self._ssl_context() if scheme == "https" else None
        # on the shared clock like every upstream deadline (a new connection only: pooled
        # ones skip this), inside whatever deadline the caller's own alarm keeps
        alarm = Alarm(self.clock)
        alarm.arm(loop.time() + connect_s)
        try:
            _, protocol = await loop.create_connection(
                lambda: Http1Connection(self, key),
                host,
                port,
                ssl=context,
                server_hostname=host if context is not None else None,
            )
        except asyncio.CancelledError:
            if not alarm.expired():
                raise
            raise UpstreamTimeout(
                f"connecting to {host}:{port} took over {connect_s:g}s", code="connect_timeout"
            ) from None
        except (OSError, ssl.SSLError) as exc:
            raise UpstreamConnectError(f"cannot connect to {host}:{port}: {exc}") from None
        finally:
            alarm.disarm()
        return protocol

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            self._ssl = ssl.create_default_context()
        return self._ssl

    def _request_head(
        self, url: str, headers: dict[str, str]
    ) -> tuple[tuple[str, str, int], bytes, bytes]:
        """The connection key, and the request head before and after its Content-Length
        line: encoded once per URL and headers (a key's requests all send the same)."""
        cache_key: tuple[object, ...] = (url, *headers.items())
        cached = self._heads.get(cache_key)
        if cached is not None:
            return cached
        key, host_header, target = self._target(url)
        empty = encode_request("POST", target, host_header, _with_defaults(headers), b"")
        head, _, tail = empty.partition(b"Content-Length: 0\r\n")
        result = (key, head, tail)
        if len(self._heads) < 1024:
            self._heads[cache_key] = result
        return result

    def _target(self, url: str) -> tuple[tuple[str, str, int], str, str]:
        parts = urlsplit(url)
        scheme = parts.scheme
        if scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamConnectError(f"unsupported upstream URL scheme in {scheme}://...")
        default = 443 if scheme == "https" else 80
        port = parts.port or default
        host = parts.hostname
        shown = f"[{host}]" if ":" in host else host
        host_header = shown if port == default else f"{shown}:{port}"
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        return (scheme, host, port), host_header, target
