"""How a request leaves for the upstream: a small one in one buffer, a large body (a long
context) written behind its head without being copied into one buffer with it."""

from __future__ import annotations

from gateway.upstream.http_client import HttpPool
from gateway.upstream.http_connection import Http1Connection


class _Transport:
    """What the connection writes, as the objects it passed."""

    def __init__(self) -> None:
        self.writes: list[tuple[bytes, ...]] = []

    def write(self, data: bytes) -> None:
        self.writes.append((data,))

    def writelines(self, data: tuple[bytes, ...]) -> None:
        self.writes.append(tuple(data))

    def is_closing(self) -> bool:  # the pool takes only a connection that is not closing
        return False


async def _sent(body: bytes) -> tuple[bytes, ...]:
    pool = HttpPool()
    connection = Http1Connection(pool, ("http", "127.0.0.1", 9, None))
    transport = _Transport()
    connection.connection_made(transport)  # type: ignore[arg-type]
    pool.put(connection)  # an idle keep-alive connection, which send() takes
    await pool.send("http://127.0.0.1:9/v1/chat/completions", {"A": "b"}, body, connect_s=1.0)
    assert len(transport.writes) == 1
    return transport.writes[0]


async def test_a_large_body_is_written_as_it_is() -> None:
    body = b"x" * (1 << 20)
    head, written = await _sent(body)
    assert written is body  # not copied behind the head
    assert head.startswith(b"POST /v1/chat/completions HTTP/1.1\r\n")
    assert b"Content-Length: 1048576\r\n" in head
    assert head.endswith(b"\r\n\r\n")


async def test_a_small_request_is_one_buffer() -> None:
    (data,) = await _sent(b'{"a":1}')
    assert data.endswith(b'\r\n\r\n{"a":1}')
