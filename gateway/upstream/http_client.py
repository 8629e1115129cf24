"""The upstream HTTP/1.1 client: a pool of keep-alive connections (upstream/http_connection.py,
one asyncio Protocol each).

Built for the gateway's one pattern (POST a body, stream the answer back) and for speed:
a request is one `transport.write` (a large body: one `writelines`, its bytes not
copied behind the head), its head encoded once per URL and headers. A kept-alive
connection that turns out to be closed before any byte of the answer is retried once on a
fresh connection.

The OS-level errors of connecting and reading become `UpstreamError`s here.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from urllib.parse import urlsplit

from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamTimeout
from gateway.framing.http1 import encode_request
from gateway.upstream.alarm import Alarm
from gateway.upstream.alarm import AlarmClock
from gateway.upstream.http_connection import Http1Connection
from gateway.upstream.http_connection import StaleConnection
from gateway.upstream.http_connection import UpstreamResponse

IDLE_TTL_S = 30.0  # a pooled connection unused this long is closed rather than reused
MAX_IDLE_PER_HOST = 512
# Without Accept-Encoding a server may compress; the gateway forwards bytes, so it asks not to.
_DEFAULT_HEADERS = {"User-Agent": "gateway/0.1", "Accept-Encoding": "identity"}


def _with_defaults(headers: dict[str, str]) -> dict[str, str]:
    """`headers` plus the client's defaults for the names it does not set (any case)."""
    given = {name.lower() for name in headers}
    extra = {k: v for k, v in _DEFAULT_HEADERS.items() if k.lower() not in given}
    return {**extra, **headers} if extra else headers


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
            except StaleConnection:
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
