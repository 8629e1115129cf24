"""A client that stops reading: the gateway's buffering stays bounded (backpressure reaches
the upstream), and after `client_write_timeout_s` the stream is ended, the upstream
connection closed, the slot freed, no task left, and the request counted as a 408."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from gateway.server.limits import SLOTS
from gateway.server.state import STATE
from gateway.stream.actor import StreamActor
from gateway.stream.client_stream import ClientStream
from tests.limits.served import Served
from tests.limits.served import served_gateway

WRITE_TIMEOUT_S = 1.0
FLOOD_CAP = 400 << 20  # the upstream would send this much to a reader that keeps up
CONTENT = "x" * 2000
FRAME = (
    b"data: "
    + json.dumps(
        {
            "id": "chatcmpl-flood",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "flood",
            "choices": [{"index": 0, "delta": {"content": CONTENT}, "finish_reason": None}],
        }
    ).encode()
    + b"\n\n"
)


class FloodUpstream:
    """An OpenAI-style upstream that streams content as fast as it is read."""

    def __init__(self) -> None:
        self.sent = 0
        self.closed = asyncio.Event()  # its client (the gateway) went away mid-stream
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}/v1"

    async def stop(self) -> None:
        assert self.runner is not None
        await self.runner.cleanup()

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            while self.sent < FLOOD_CAP:
                await response.write(FRAME)
                self.sent += len(FRAME)
        except ConnectionError:
            self.closed.set()
        return response


@pytest.fixture(params=[15.0, 0.1], ids=["keepalive-15s", "keepalive-0.1s"])
async def gateway(request: pytest.FixtureRequest) -> AsyncIterator[tuple[Served, FloodUpstream]]:
    """keepalive-0.1s: the actor's timer wakes a blocked write ten times a second (to write
    a keep-alive): the bound must hold across those wake-ups, not restart at each."""
    upstream = FloodUpstream()
    await upstream.start()
    config = f"""
store: {{url: "memory://"}}
server: {{client_write_timeout_s: {WRITE_TIMEOUT_S}, keepalive_s: {request.param}}}
providers:
  - {{name: up, kind: openai, base_url: "{upstream.url}", keys: [{{key: k}}]}}
"""
    try:
        async with served_gateway(config) as served:
            yield served, upstream
    finally:
        await upstream.stop()


async def stalled_client(served: Served) -> socket.socket:
    """A client with a tiny receive buffer that sends a streaming request, then reads
    nothing."""
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    port = int(served.url.rsplit(":", 1)[1])
    await loop.sock_connect(sock, ("127.0.0.1", port))
    body = json.dumps(
        {"model": "up/flood", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    ).encode()
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    await loop.sock_sendall(sock, head + body)
    return sock


async def test_stalled_client_is_bounded_then_cut_off(
    gateway: tuple[Served, FloodUpstream],
) -> None:
    served, upstream = gateway
    state = served.app[STATE]
    baseline = asyncio.all_tasks()
    loop = asyncio.get_running_loop()
    sock = await stalled_client(served)
    try:
        started = loop.time()
        for _ in range(200):
            if state.active:
                break
            await asyncio.sleep(0.01)
        (actor,) = state.active
        assert isinstance(actor, StreamActor)
        transport = actor.client._http.transport
        assert transport is not None
        # while the client reads nothing: the bytes buffered for it, and what the upstream
        # manages to send, stop growing
        most_buffered = 0
        sent_early = 0
        while loop.time() - started < WRITE_TIMEOUT_S * 0.9 and not transport.is_closing():
            most_buffered = max(most_buffered, transport.get_write_buffer_size())
            if loop.time() - started > WRITE_TIMEOUT_S * 0.4 and not sent_early:
                sent_early = upstream.sent
            await asyncio.sleep(0.005)
        sent_late = upstream.sent
        high_water = transport.get_write_buffer_limits()[1]
        print(f"most buffered for the client: {most_buffered} B (high water {high_water})")
        print(f"upstream sent: {sent_early} B at 0.4 T, {sent_late} B at 0.9 T")
        assert most_buffered <= high_water + (2 << 20)
        assert sent_late < 64 << 20, "the upstream was read without bound"
        assert sent_late - sent_early < 4 << 20, "backpressure did not reach the upstream"
        assert not upstream.closed.is_set(), "ended before the write timeout"

        # past the write timeout: the client is cut off and the upstream released
        await asyncio.wait_for(upstream.closed.wait(), WRITE_TIMEOUT_S + 2)
        ended = loop.time() - started
        assert WRITE_TIMEOUT_S <= ended < WRITE_TIMEOUT_S + 0.5, ended
        for _ in range(200):
            if not state.active and asyncio.all_tasks() <= baseline:
                break
            await asyncio.sleep(0.01)
        assert not state.active
        leftover = asyncio.all_tasks() - baseline
        assert not leftover, leftover
        slots = served.app[SLOTS]
        assert slots.total == 0
        # the client's connection was closed: reading gets what was in flight, then its
        # end (EOF or a reset), never the stream's end event
        received = await asyncio.to_thread(_read_to_end, sock)
        assert b"[DONE]" not in received[-64:]
    finally:
        sock.close()
    metrics = await _metrics(served)
    # counted as the client's failure (408), not the upstream's
    assert 'provider="up",status_class="4xx"} 1.0' in metrics


def _read_to_end(sock: socket.socket) -> bytes:
    sock.setblocking(True)
    sock.settimeout(5)  # a connection left open would time out here: TimeoutError
    chunks = []
    try:
        while chunk := sock.recv(1 << 16):
            chunks.append(chunk)
    except ConnectionResetError:
        pass
    return b"".join(chunks)


async def _metrics(served: Served) -> str:
    port = int(served.url.rsplit(":", 1)[1])
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n\r\n")
    data = await reader.read()
    writer.close()
    await writer.wait_closed()
    lines = data.decode().splitlines()
    return "\n".join(line for line in lines if line.startswith("gateway_requests_total"))


async def test_a_client_that_keeps_up_takes_no_timer_per_write(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bounded (timed) write is for a client that fell behind; a normal stream's writes
    all take the untimed path, its last write (the end of the response) too."""
    bounded: list[bool] = []
    original = ClientStream._write_bounded

    async def counting(
        self: ClientStream, response: web.StreamResponse, data: bytes, *, eof: bool
    ) -> None:
        bounded.append(eof)
        await original(self, response, data, eof=eof)

    monkeypatch.setattr(ClientStream, "_write_bounded", counting)
    config = """
store: {url: "memory://"}
providers: [{name: mock, kind: mock, mock: {chunks: 40}}]
"""
    async with served_gateway(config) as served:
        port = int(served.url.rsplit(":", 1)[1])
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = json.dumps(
            {"model": "mock/mock", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        ).encode()
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: gw\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body
        )
        data = await reader.read()
        writer.close()
        await writer.wait_closed()
    assert data.count(b"data: ") > 40
    assert data.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n")
    assert bounded == []
