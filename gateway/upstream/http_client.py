"""The upstream HTTP/1.1 client: a pool of keep-alive connections (upstream/http_connection.py,
one asyncio Protocol each).

Built for the gateway's one pattern (POST a body, stream the answer back) and for speed:
a request is one `transport.write` (a large body: one `writelines`, its bytes not
copied behind the head), its head encoded once per URL and headers. A request is sent
again only when none of it was written: a pooled connection already closed (or closing)
when taken is dropped for another. Once written, a connection that closes before the
answer is the attempt's failure (counted, seen by key health and `x-gateway-attempts`),
never resent here: the upstream may have had it (docs/routing.md, "No invisible resends").

Connections are pooled per (scheme, host, port, egress profile): two providers that reach
the same upstream through different proxies or trust never share one. A profile's route (a
forward proxy or direct, upstream/egress.py) is settled once per key; https through a proxy
is a CONNECT tunnel with TLS to the upstream inside it, plain http an absolute-form request
to the proxy. The time to the proxy, its CONNECT answer and the TLS handshake all count
against `connect_s`.

The OS-level errors of connecting and reading become `UpstreamError`s here.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from urllib.parse import urlsplit

from gateway.config_base import Egress
from gateway.config_base import ssl_text
from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamTimeout
from gateway.framing.http1 import encode_request
from gateway.upstream.alarm import Alarm
from gateway.upstream.alarm import AlarmClock
from gateway.upstream.egress import ProxyEndpoint
from gateway.upstream.egress import env_proxy_name
from gateway.upstream.egress import open_tunnel
from gateway.upstream.egress import parse_proxy
from gateway.upstream.egress import proxy_for
from gateway.upstream.http_connection import Http1Connection
from gateway.upstream.http_connection import UpstreamResponse
from gateway.upstream.tls import client_context

IDLE_TTL_S = 30.0  # a pooled connection unused this long is closed rather than reused
MAX_IDLE_PER_HOST = 512
# Without Accept-Encoding a server may compress; the gateway forwards bytes, so it asks not to.
_DEFAULT_HEADERS = {"User-Agent": "gateway/0.1", "Accept-Encoding": "identity"}

# (scheme, host, port, the provider's egress profile): what a pooled connection is for
PoolKey = tuple[str, str, int, Egress | None]


def _with_defaults(headers: dict[str, str]) -> dict[str, str]:
    """`headers` plus the client's defaults for the names it does not set (any case)."""
    given = {name.lower() for name in headers}
    extra = {k: v for k, v in _DEFAULT_HEADERS.items() if k.lower() not in given}
    return {**extra, **headers} if extra else headers


class PendingResponse:
    """A request on the wire whose answer has not arrived yet."""

    __slots__ = ("_connection", "proxy")

    def __init__(
        self, connection: Http1Connection, head: bytes, body: bytes, proxy: ProxyEndpoint | None
    ) -> None:
        # the forward proxy the request went through (plain http: the proxy answers it)
        self.proxy = proxy
        self._connection = connection
        connection.send(head, body)  # not kept: a long prompt is not held past its write

    async def response(self) -> UpstreamResponse:
        """The response once its head arrived. Cancelling this wait (a timer that wakes the
        caller) leaves the request running: call again to keep waiting."""
        head = await self._connection.head()
        return UpstreamResponse(self._connection, head)

    def abort(self) -> None:
        self._connection.abort()


class HttpPool:
    """Idle keep-alive connections per `PoolKey`; connects on demand."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None) -> None:
        self._idle: dict[PoolKey, list[Http1Connection]] = {}
        # None: each profile's shared context (upstream/tls.py); set: it, for every https
        # connection of a provider without `tls` (tests)
        self._ssl = ssl_context
        self._heads: dict[tuple[object, ...], tuple[PoolKey, bytes, bytes]] = {}
        self._routes: dict[PoolKey, ProxyEndpoint | None] = {}  # each key's proxy, or direct
        # the deadlines of the requests waiting on this pool's upstreams, under one timer
        self.clock = AlarmClock()

    async def request(
        self,
        url: str,
        headers: dict[str, str],
        body: bytes,
        *,
        connect_s: float,
        egress: Egress | None = None,
    ) -> UpstreamResponse:
        """POST `body` to `url`; returns once the response head arrived."""
        pending = await self.send(url, headers, body, connect_s=connect_s, egress=egress)
        try:
            return await pending.response()
        except BaseException:
            pending.abort()
            raise

    async def send(
        self,
        url: str,
        headers: dict[str, str],
        body: bytes,
        *,
        connect_s: float,
        egress: Egress | None = None,
    ) -> PendingResponse:
        """POST `body` to `url` (connecting if no idle connection is kept); the answer is
        awaited separately, so a caller may wake up meanwhile without giving it up."""
        traceparent = headers.get("traceparent")
        if traceparent is None:
            key, head, tail = self._request_head(url, headers, egress)
            request_head = b"%sContent-Length: %d\r\n%s" % (head, len(body), tail)
        else:
            # each request's own (tracing): kept out of the head cached per key and headers
            rest = {k: v for k, v in headers.items() if k != "traceparent"}
            key, head, tail = self._request_head(url, rest, egress)
            request_head = b"%sContent-Length: %d\r\ntraceparent: %s\r\n%s" % (
                head,
                len(body),
                _header_value(traceparent),
                tail,
            )
        connection = self._take(key) or await self._connect(key, connect_s)
        return PendingResponse(connection, request_head, body, self._route(key))

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

    def _take(self, key: PoolKey) -> Http1Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            connection = idle.pop()
            transport = connection.transport
            # closed, or its close already under way: nothing will have been written to it
            usable = not connection.closed and transport is not None and not transport.is_closing()
            if usable and now - connection.idle_since < IDLE_TTL_S:
                return connection
            connection.abort()
        return None

    async def _connect(self, key: PoolKey, connect_s: float) -> Http1Connection:
        scheme, host, port, egress = key
        loop = asyncio.get_running_loop()
        proxy = self._route(key)
        # on the shared clock like every upstream deadline (a new connection only: pooled
        # ones skip this), inside whatever deadline the caller's own alarm keeps
        alarm = Alarm(self.clock)
        alarm.arm(loop.time() + connect_s)
        via = f" through proxy {proxy.label}" if proxy is not None else ""
        try:
            context = self._ssl_context(egress) if scheme == "https" else None
            if proxy is not None and context is not None:
                return await self._tunnel(key, proxy, context)
            target_host, target_port = (proxy.host, proxy.port) if proxy else (host, port)
            _, protocol = await loop.create_connection(
                lambda: Http1Connection(self, key),
                target_host,
                target_port,
                ssl=context,
                server_hostname=host if context is not None else None,
            )
        except asyncio.CancelledError:
            if not alarm.expired():
                raise
            raise UpstreamTimeout(
                f"connecting to {host}:{port}{via} took over {connect_s:g}s",
                code="connect_timeout",
            ) from None
        except ssl.SSLError as exc:
            raise UpstreamConnectError(
                f"TLS with {host}:{port}{via} failed: {_ssl_reason(exc)}"
            ) from None
        except OSError as exc:
            where = f"proxy {proxy.label} (for {host}:{port})" if proxy else f"{host}:{port}"
            raise UpstreamConnectError(f"cannot connect to {where}: {exc}") from None
        finally:
            alarm.disarm()
        return protocol

    async def _tunnel(
        self, key: PoolKey, proxy: ProxyEndpoint, context: ssl.SSLContext
    ) -> Http1Connection:
        """A connection to the upstream through `proxy`'s CONNECT tunnel, TLS inside it
        checked against the upstream's host."""
        _, host, port, _ = key
        raw = await open_tunnel(proxy, host, port)
        connection = Http1Connection(self, key)
        try:
            transport = await asyncio.get_running_loop().start_tls(
                raw, connection, context, server_hostname=host
            )
        except BaseException:
            raw.abort()
            raise
        if transport is None:  # the loop's contract allows it; the tunnel is no use then
            raw.abort()
            raise UpstreamConnectError(f"TLS with {host}:{port} through proxy did not start")
        connection.connection_made(transport)
        return connection

    def _ssl_context(self, egress: Egress | None) -> ssl.SSLContext:
        if egress is None or egress.tls is None:
            if self._ssl is not None:
                return self._ssl
            return client_context(None)
        return client_context(egress.tls)

    def _route(self, key: PoolKey) -> ProxyEndpoint | None:
        """The proxy `key`'s connections go through (None: direct), settled once per key."""
        if key in self._routes:
            return self._routes[key]
        scheme, host, port, egress = key
        configured = egress.proxy if egress is not None else None
        shown = f"[{host}]" if ":" in host else host
        url = proxy_for(f"{scheme}://{shown}:{port}/", configured)
        proxy = None
        if url is not None:
            try:
                proxy = parse_proxy(url)
            except ValueError as exc:
                name = "providers[].proxy" if configured else env_proxy_name(scheme)
                raise UpstreamConnectError(f"the proxy in {name} {exc}") from None
        if len(self._routes) < 4096:
            self._routes[key] = proxy
        return proxy

    def _request_head(
        self, url: str, headers: dict[str, str], egress: Egress | None
    ) -> tuple[PoolKey, bytes, bytes]:
        """The connection key, and the request head before and after its Content-Length
        line: encoded once per URL, egress and headers (a key's requests all send the same)."""
        cache_key: tuple[object, ...] = (url, egress, *headers.items())
        cached = self._heads.get(cache_key)
        if cached is not None:
            return cached
        key, host_header, target = self._target(url, egress)
        proxy = self._route(key)
        if proxy is not None and key[0] == "http":
            # through a proxy, plain http is sent to it whole: absolute-form target
            target = f"http://{host_header}{target}"
            if proxy.authorization:
                headers = {**headers, "Proxy-Authorization": proxy.authorization}
        empty = encode_request("POST", target, host_header, _with_defaults(headers), b"")
        head, _, tail = empty.partition(b"Content-Length: 0\r\n")
        result = (key, head, tail)
        if len(self._heads) < 1024:
            self._heads[cache_key] = result
        return result

    def _target(self, url: str, egress: Egress | None) -> tuple[PoolKey, str, str]:
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
        return (scheme, host, port, egress), host_header, target


def _header_value(value: str) -> bytes:
    """A header value as sent; one that could end the line or the head is refused (a
    traceparent is the gateway's own, but a header line is never written unchecked)."""
    if "\r" in value or "\n" in value:
        raise ValueError("header 'traceparent' contains a line break")
    return value.encode("latin-1")


def _ssl_reason(exc: ssl.SSLError) -> str:
    """An SSL error as one line that says what to fix."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return (
            f"certificate verify failed: {exc.verify_message} ({exc.reason}; trust its "
            "CA with providers[].tls.ca_file or SSL_CERT_FILE)"
        )
    return ssl_text(exc)
