"""The pooled upstream HTTP/1.1 client against scripted raw-asyncio servers on loopback."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field

import pytest

from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.upstream import http_client
from gateway.upstream.http_client import HttpPool
from gateway.upstream.http_connection import HIGH_WATER
from gateway.upstream.http_connection import UpstreamResponse

CONNECT_S = 2.0
WAIT_S = 1.0  # the bound on waiting for anything the server should observe


def ok(body: bytes = b"ok", *, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n%s\r\n%s" % (len(body), extra, body)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKED_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


# --- a scripted server -----------------------------------------------------------------------


@dataclass
class Request:
    method: str
    target: str
    version: str
    headers: list[tuple[str, str]]  # as sent, in order
    body: bytes

    def header(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]


@dataclass
class Conn:
    """One accepted connection, as the server's handler sees it."""

    index: int
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    requests: list[Request] = field(default_factory=list)
    eof: asyncio.Event = field(default_factory=asyncio.Event)  # the client closed its side

    async def read_request(self) -> Request | None:
        """The next request on this connection; None (and `eof` set) when the client closed."""
        try:
            raw = await self.reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self.eof.set()
            return None
        lines = raw[:-4].decode("latin-1").split("\r\n")
        method, target, version = lines[0].split(" ")
        headers = []
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers.append((name, value.strip()))
        request = Request(method, target, version, headers, b"")
        (length,) = request.header("content-length")
        request.body = await self.reader.readexactly(int(length))
        self.requests.append(request)
        return request

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def wait_eof(self) -> None:
        """Discard whatever the client sends until it closes the connection."""
        with contextlib.suppress(ConnectionError):
            while await self.reader.read(1 << 16):
                pass
        self.eof.set()

    async def serve(self, *responses: bytes) -> None:
        """Answer each request with the next response (the last one repeats) until EOF."""
        for i in range(100):  # bounded
            if await self.read_request() is None:
                return
            await self.send(responses[min(i, len(responses) - 1)])


Handler = Callable[[Conn], Awaitable[None]]


class RawServer:
    """asyncio.start_server on 127.0.0.1 running `handler` for every accepted connection.

    After the handler returns, the server closes the connection."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.connections: list[Conn] = []
        self.errors: list[BaseException] = []
        self._closing = False

    async def start(self) -> RawServer:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return self

    @property
    def port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def url(self, path: str = "/v1/chat/completions") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    @property
    def requests(self) -> list[Request]:
        return [r for c in self.connections for r in c.requests]

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = Conn(len(self.connections), reader, writer)
        self.connections.append(conn)
        try:
            await self._handler(conn)
        except Exception as exc:
            if not self._closing:
                self.errors.append(exc)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)

    async def aclose(self) -> None:
        self._closing = True
        if self._server is not None:
            self._server.close()
        for conn in self.connections:
            conn.writer.close()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=2.0)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending, timeout=2.0)
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.sleep(0.01)  # let the closed transports' callbacks run


@pytest.fixture
async def pool() -> AsyncIterator[HttpPool]:
    pool = HttpPool()
    yield pool
    pool.close()
    await asyncio.sleep(0.01)  # let the aborted transports close their sockets


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[Handler], Awaitable[RawServer]]]:
    servers: list[RawServer] = []

    async def start(handler: Handler) -> RawServer:
        server = await RawServer(handler).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.aclose()
    for server in servers:
        assert not server.errors, server.errors


async def read_all(response: UpstreamResponse, *, limit: int = 100_000) -> bytes:
    parts = []
    for _ in range(limit):  # bounded
        data = await asyncio.wait_for(response.read(), 5.0)
        if not data:
            return b"".join(parts)
        parts.append(data)
    raise AssertionError("the body did not end")


async def eventually(predicate: Callable[[], bool], within: float = WAIT_S) -> None:
    for _ in range(int(within / 0.005) + 1):  # bounded
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition did not hold in time")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- keep-alive ------------------------------------------------------------------------------


async def test_keep_alive_reuses_one_connection(pool: HttpPool, serve) -> None:
    server = await serve(lambda conn: conn.serve(ok(b"first"), ok(b"second")))
    for expected in (b"first", b"second", b"second"):
        response = await pool.request(server.url(), {}, b"{}", connect_s=CONNECT_S)
        assert response.status == 200
        assert response.head.keep_alive
        assert await read_all(response) == expected
        assert await response.read() == b""  # the end stays the end
        response.release()
    assert len(server.connections) == 1
    assert len(server.requests) == 3


async def test_connection_close_response_opens_a_new_connection(pool: HttpPool, serve) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(ok(b"bye", extra=b"Connection: close\r\n"))
        # the server keeps its side open: the client must not reuse it anyway
        await conn.serve(ok(b"unexpected reuse"))

    server = await serve(handler)
    first = await pool.request(server.url(), {}, b"1", connect_s=CONNECT_S)
    assert first.head.keep_alive is False
    assert await read_all(first) == b"bye"
    first.release()
    async with asyncio.timeout(WAIT_S):
        await server.connections[0].eof.wait()  # release() closed it
    second = await pool.request(server.url(), {}, b"2", connect_s=CONNECT_S)
    assert await read_all(second) == b"bye"
    second.release()
    assert len(server.connections) == 2
    assert [len(c.requests) for c in server.connections] == [1, 1]


async def test_close_delimited_response_is_read_to_eof_and_not_reused(
    pool: HttpPool, serve
) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\npart one, ")
        await asyncio.sleep(0.02)
        await conn.send(b"part two")

    server = await serve(handler)
    for _ in range(2):
        response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
        assert response.head.keep_alive is False
        assert await read_all(response) == b"part one, part two"
        response.release()
    assert len(server.connections) == 2


# --- the request on the wire -----------------------------------------------------------------


async def test_the_request_on_the_wire(pool: HttpPool, serve) -> None:
    server = await serve(lambda conn: conn.serve(ok()))
    body = b'{"model":"m","messages":[]}'
    headers = {"Authorization": "Bearer sk-test", "Content-Type": "application/json", "X-A": "b"}
    response = await pool.request(
        server.url("/v1/chat/completions?api-version=2024-06-01&x=1"),
        headers,
        body,
        connect_s=CONNECT_S,
    )
    await read_all(response)
    response.release()
    (request,) = server.requests
    assert request.method == "POST"
    assert request.target == "/v1/chat/completions?api-version=2024-06-01&x=1"
    assert request.version == "HTTP/1.1"
    assert request.header("Host") == [f"127.0.0.1:{server.port}"]
    assert request.header("Content-Length") == [str(len(body))]
    assert request.header("Accept-Encoding") == ["identity"]
    assert request.header("Authorization") == ["Bearer sk-test"]
    assert request.header("Content-Type") == ["application/json"]
    assert request.header("X-A") == ["b"]
    assert request.body == body


async def test_a_reused_request_head_carries_each_requests_own_length_and_key(
    pool: HttpPool, serve
) -> None:
    """The head is encoded once per URL and headers: each request still gets its own
    Content-Length, and other headers (another key) get their own head."""
    server = await serve(lambda conn: conn.serve(ok(), ok(), ok()))
    url = server.url("/v1/chat/completions")
    sent = [("sk-a", b'{"a":1}'), ("sk-a", b'{"a":12345}'), ("sk-b", b"")]
    for key, body in sent:
        headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
        response = await pool.request(url, headers, body, connect_s=CONNECT_S)
        await read_all(response)
        response.release()
    got = [(r.header("Authorization"), r.header("Content-Length"), r.body) for r in server.requests]
    assert got == [(["Bearer " + key], [str(len(body))], body) for key, body in sent]
    assert all(r.header("Host") == [f"127.0.0.1:{server.port}"] for r in server.requests)


async def test_each_requests_traceparent_is_sent_with_the_one_head_of_its_key(
    pool: HttpPool, serve
) -> None:
    """A traceparent differs per request (tracing): it is written into the head cached for
    the URL and the other headers, not made a cache entry of its own per request."""
    server = await serve(lambda conn: conn.serve(ok(), ok(), ok()))
    url = server.url("/v1/chat/completions")
    parents = [f"00-{n:032x}-{n:016x}-01" for n in (1, 2, 3)]
    for parent in parents:
        headers = {"Authorization": "Bearer sk-a", "traceparent": parent}
        response = await pool.request(url, headers, b"{}", connect_s=CONNECT_S)
        await read_all(response)
        response.release()
    assert [r.header("traceparent") for r in server.requests] == [[p] for p in parents]
    assert all(r.header("Authorization") == ["Bearer sk-a"] for r in server.requests)
    assert all(r.header("Content-Length") == ["2"] for r in server.requests)
    assert len(pool._heads) == 1
    with pytest.raises(ValueError, match="line break"):
        await pool.send(url, {"traceparent": "00-x\r\nX-B: c"}, b"", connect_s=1)


async def test_a_header_with_a_line_break_is_refused_every_time(pool: HttpPool) -> None:
    for _ in range(2):
        with pytest.raises(ValueError, match="line break"):
            await pool.send("http://127.0.0.1:9/x", {"X-A": "b\r\nX-B: c"}, b"", connect_s=1)


async def test_root_target_when_the_url_has_no_path(pool: HttpPool, serve) -> None:
    server = await serve(lambda conn: conn.serve(ok()))
    response = await pool.request(f"http://127.0.0.1:{server.port}", {}, b"", connect_s=CONNECT_S)
    await read_all(response)
    response.release()
    assert server.requests[0].target == "/"


@pytest.mark.parametrize(
    ("url", "key", "host", "target"),
    [
        ("http://upstream.test/v1/x", ("http", "upstream.test", 80), "upstream.test", "/v1/x"),
        ("https://upstream.test/v1", ("https", "upstream.test", 443), "upstream.test", "/v1"),
        ("http://upstream.test:8080", ("http", "upstream.test", 8080), "upstream.test:8080", "/"),
        ("https://u.test:80/a?b=c", ("https", "u.test", 80), "u.test:80", "/a?b=c"),
        ("http://[::1]:8000/p", ("http", "::1", 8000), "[::1]:8000", "/p"),
    ],
)
def test_target_and_host_header(
    url: str, key: tuple[str, str, int], host: str, target: str
) -> None:
    # No connection: how a URL becomes the pool key (no egress profile: None), the Host
    # header and the request target.
    assert HttpPool()._target(url, None) == ((*key, None), host, target)


async def test_unsupported_scheme(pool: HttpPool) -> None:
    with pytest.raises(UpstreamConnectError, match="scheme"):
        await pool.request("ftp://127.0.0.1/x", {}, b"", connect_s=CONNECT_S)


# --- streaming -------------------------------------------------------------------------------


async def test_chunked_body_arrives_as_it_is_written(pool: HttpPool, serve) -> None:
    parts = [b"data: 1\n\n", b"data: 2\n\n", b"data: [DONE]\n\n"]
    proceed = asyncio.Event()

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(CHUNKED_HEAD)
        for part in parts:
            await asyncio.sleep(0.02)
            await conn.send(chunk(part))
            async with asyncio.timeout(WAIT_S):
                await proceed.wait()  # the client got it before the next was written
            proceed.clear()
        await conn.send(b"0\r\n\r\n")
        await conn.serve(ok())

    server = await serve(handler)
    response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert response.head.headers["transfer-encoding"] == "chunked"
    for part in parts:
        assert await asyncio.wait_for(response.read(), WAIT_S) == part
        proceed.set()
    assert await asyncio.wait_for(response.read(), WAIT_S) == b""
    response.release()
    again = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)  # reused
    assert await read_all(again) == b"ok"
    again.release()
    assert len(server.connections) == 1


async def test_head_and_body_split_across_many_writes(pool: HttpPool, serve) -> None:
    raw = CHUNKED_HEAD + chunk(b"hello ") + chunk(b"world") + b"0\r\nX-Trailer: t\r\n\r\n"

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        for i in range(0, len(raw), 7):
            await conn.send(raw[i : i + 7])
            await asyncio.sleep(0.001)
        await conn.wait_eof()

    server = await serve(handler)
    response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await read_all(response) == b"hello world"
    response.release()


# --- stale connections, idle TTL -------------------------------------------------------------


async def test_a_request_written_to_a_kept_alive_connection_is_never_sent_again(
    pool: HttpPool, serve
) -> None:
    """The server read the second request, then hung up without a byte of an answer: it
    had the request, so the client must not send it again (the bug: it did, on a fresh
    connection, so the upstream got it twice). The failure is the caller's to count."""

    async def handler(conn: Conn) -> None:
        if conn.index == 0:
            await conn.read_request()
            await conn.send(ok(b"first"))
            await conn.read_request()  # then hang up without a byte of an answer
            return
        await conn.serve(ok(b"second"))

    server = await serve(handler)
    first = await pool.request(server.url(), {}, b"a", connect_s=CONNECT_S)
    assert await read_all(first) == b"first"
    first.release()
    with pytest.raises(UpstreamConnectError, match="kept-alive connection before answering"):
        await pool.request(server.url(), {}, b"b", connect_s=CONNECT_S)
    assert [r.body for r in server.requests] == [b"a", b"b"]  # once, never again
    assert len(server.connections) == 1
    third = await pool.request(server.url(), {}, b"c", connect_s=CONNECT_S)  # a new one
    assert await read_all(third) == b"second"
    third.release()


async def test_idle_connection_closed_by_the_server_is_not_used(pool: HttpPool, serve) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(ok(b"only one"))  # then close the kept-alive connection

    server = await serve(handler)
    first = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await read_all(first) == b"only one"
    first.release()
    connection = first.connection
    await eventually(lambda: connection.closed)  # the client noticed the close while idle
    second = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await read_all(second) == b"only one"
    second.release()
    assert second.connection is not connection
    assert len(server.connections) == 2


async def test_a_pooled_connection_whose_close_is_under_way_is_not_written_to(
    pool: HttpPool, serve
) -> None:
    """What is provably safe: a connection already closing when taken gets nothing written;
    the request goes on another, and the upstream sees it once."""
    server = await serve(lambda conn: conn.serve(ok(b"x")))
    first = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await read_all(first) == b"x"
    first.release()
    connection = first.connection
    assert connection.transport is not None
    connection.transport.close()  # closing, its connection_lost not yet run
    second = await pool.request(server.url(), {}, b"once", connect_s=CONNECT_S)
    assert await read_all(second) == b"x"
    second.release()
    assert second.connection is not connection
    assert [r.body for r in server.requests].count(b"once") == 1


async def test_idle_ttl_expired_connection_is_closed_not_reused(
    pool: HttpPool, serve, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = await serve(lambda conn: conn.serve(ok()))
    first = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    await read_all(first)
    first.release()
    monkeypatch.setattr(http_client, "IDLE_TTL_S", 0.05)
    await asyncio.sleep(0.1)
    second = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    await read_all(second)
    second.release()
    assert len(server.connections) == 2
    async with asyncio.timeout(WAIT_S):
        await server.connections[0].eof.wait()  # the expired one was closed
    assert first.connection.closed


# --- release and abort -----------------------------------------------------------------------


async def test_abort_mid_body_closes_the_connection(pool: HttpPool, serve) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(CHUNKED_HEAD + chunk(b"partial"))
        await conn.wait_eof()

    server = await serve(handler)
    response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"partial"
    started = time.monotonic()
    response.abort()
    async with asyncio.timeout(WAIT_S):
        await server.connections[0].eof.wait()
    assert time.monotonic() - started < WAIT_S
    assert response.connection.closed
    with pytest.raises(UpstreamError):  # reading an aborted response does not hang
        await asyncio.wait_for(response.read(), WAIT_S)
    again = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await asyncio.wait_for(again.read(), WAIT_S) == b"partial"
    again.abort()
    assert len(server.connections) == 2


async def test_release_before_the_end_closes_instead_of_pooling(pool: HttpPool, serve) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10)
        await conn.wait_eof()

    server = await serve(handler)
    response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await asyncio.wait_for(response.read(), WAIT_S) == b"x" * 10
    response.release()  # not at the end: the same as abort()
    async with asyncio.timeout(WAIT_S):
        await server.connections[0].eof.wait()
    assert pool._take(response.connection.key) is None


async def test_release_with_unread_body_does_not_leak_into_the_next_response(
    pool: HttpPool, serve
) -> None:
    server = await serve(lambda conn: conn.serve(ok(b"hello"), ok(b"world")))
    first = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    await asyncio.sleep(0.05)  # the whole body (and END) arrived; the caller did not read it
    first.release()  # unread body: the connection is closed, not pooled
    second = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    # a fresh connection's first answer; never the old body glued to a new one
    assert await read_all(second) == b"hello"
    assert len(server.connections) == 2
    second.release()


# --- failures --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("partial", "body"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 10, b"x" * 10),
        (CHUNKED_HEAD + chunk(b"data: 1\n\n") + b"20\r\nonly part", b"data: 1\n\nonly part"),
        (CHUNKED_HEAD + chunk(b"data: 1\n\n"), b"data: 1\n\n"),
    ],
    ids=["length", "chunked-mid-chunk", "chunked-between-chunks"],
)
async def test_server_closes_mid_body(pool: HttpPool, serve, partial: bytes, body: bytes) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(partial)  # and close

    server = await serve(handler)
    response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    got = bytearray()
    with pytest.raises((UpstreamProtocolError, UpstreamConnectError)):  # noqa: PT012
        for _ in range(100):  # bounded
            data = await asyncio.wait_for(response.read(), WAIT_S)
            assert data, "a truncated body must not read as complete"
            got += data
    assert got == body  # every byte that came, then the error
    response.release()  # after an error: closes, never pools
    assert pool._take(response.connection.key) is None


async def test_server_closes_before_the_head(pool: HttpPool, serve) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Le")

    server = await serve(handler)
    with pytest.raises(UpstreamConnectError, match="closed the connection"):
        await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)


async def test_malformed_head_raises_from_request(pool: HttpPool, serve) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 OK 200\r\n\r\n")
        await conn.wait_eof()

    server = await serve(handler)
    with pytest.raises(UpstreamProtocolError, match="status line"):
        await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    async with asyncio.timeout(WAIT_S):
        await server.connections[0].eof.wait()  # the client closed it


async def test_garbage_after_the_body_fails_the_connection(pool: HttpPool, serve) -> None:
    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(ok(b"body") + b"EXTRA")
        await conn.wait_eof()

    server = await serve(handler)
    response: UpstreamResponse | None = None
    # In one segment the junk fails the whole feed, head included: the error may come from
    # request() as well as from read().
    with pytest.raises(UpstreamProtocolError, match="after its response ended"):  # noqa: PT012
        response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
        await read_all(response)
    if response is not None:
        response.release()
    async with asyncio.timeout(WAIT_S):
        await server.connections[0].eof.wait()


async def test_connect_refused(pool: HttpPool) -> None:
    with pytest.raises(UpstreamConnectError, match="cannot connect"):
        await pool.request(f"http://127.0.0.1:{free_port()}/v1", {}, b"", connect_s=CONNECT_S)


# --- flow control ----------------------------------------------------------------------------


async def test_reading_pauses_while_too_much_is_buffered(pool: HttpPool, serve) -> None:
    size = 8 << 20
    pattern = bytes(range(256)) * 4096  # 1 MiB
    body = pattern * (size // len(pattern))

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        for i in range(0, size, 1 << 16):
            conn.writer.write(body[i : i + (1 << 16)])
            await conn.writer.drain()
        await conn.serve(ok())

    server = await serve(handler)
    response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    connection = response.connection
    most = 0
    for _ in range(30):  # 0.3 s without reading
        await asyncio.sleep(0.01)
        most = max(most, connection._buffered)
    assert connection._paused
    assert HIGH_WATER < most <= HIGH_WATER + (1 << 20)
    received = await read_all(response)
    assert len(received) == size
    assert received == body
    assert not connection._paused
    response.release()
    again = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await read_all(again) == b"ok"
    again.release()
    assert len(server.connections) == 1


async def test_reading_pauses_for_a_chunked_stream_too(pool: HttpPool, serve) -> None:
    piece = b"y" * 60_000
    count = 80  # ~4.6 MiB

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await conn.send(CHUNKED_HEAD)
        for _ in range(count):
            conn.writer.write(chunk(piece))
            await conn.writer.drain()
        await conn.send(b"0\r\n\r\n")
        await conn.wait_eof()

    server = await serve(handler)
    response = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    await asyncio.sleep(0.3)
    assert response.connection._paused
    assert response.connection._buffered <= HIGH_WATER + (1 << 20)
    total = 0
    for _ in range(10_000):  # bounded
        data = await asyncio.wait_for(response.read(), 5.0)
        if not data:
            break
        assert set(data) == {ord("y")}
        total += len(data)
    assert total == count * len(piece)
    response.release()
    assert len(server.connections) == 1


# --- pool.close() ----------------------------------------------------------------------------


async def test_pool_close_closes_idle_connections(pool: HttpPool, serve) -> None:
    server = await serve(lambda conn: conn.serve(ok()))
    responses = [await pool.request(server.url(), {}, b"", connect_s=CONNECT_S) for _ in range(3)]
    for response in responses:
        assert await read_all(response) == b"ok"
        response.release()
    assert len(server.connections) == 3
    pool.close()
    async with asyncio.timeout(WAIT_S):
        for conn in server.connections:
            await conn.eof.wait()
    assert all(r.connection.closed for r in responses)
    # The pool still works after close(): it connects anew.
    again = await pool.request(server.url(), {}, b"", connect_s=CONNECT_S)
    assert await read_all(again) == b"ok"
    again.release()
    assert len(server.connections) == 4


async def test_a_woken_wait_for_the_head_can_wait_again(pool: HttpPool, serve) -> None:
    """The actor's timer wakes it while the upstream holds its head back; the request must
    survive that and the head must arrive to the next wait."""

    async def handler(conn: Conn) -> None:
        await conn.read_request()
        await asyncio.sleep(0.3)
        await conn.send(ok(b"late"))

    server = await serve(handler)
    pending = await pool.send(server.url(), {}, b"", connect_s=CONNECT_S)
    wakes = 0
    while True:
        try:
            async with asyncio.timeout(0.05):
                response = await pending.response()
            break
        except TimeoutError:
            wakes += 1
            assert wakes < 100
    assert wakes >= 3
    assert await read_all(response) == b"late"
    response.release()
    assert len(server.connections) == 1
