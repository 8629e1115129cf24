"""Floors: what aiohttp alone costs per request on this machine, to size optimisations.

    python -m bench.micro.floors client [--seconds 5] [--concurrency 16]
    python -m bench.micro.floors server [--seconds 5] [--connections 16]

`client`: starts bench.fake_upstream, then in this process runs `--concurrency` tasks that
each send the gateway's upstream request in a loop, in both modes (non-stream JSON, stream SSE
with 20 content chunks, as bench.load), through
- aiohttp: `ClientSession.request` + `content.readany()` to the end + `release()`, with the
  options the gateway uses (gateway/app.py::_open_pool, gateway/upstream/transport.py);
- raw: a minimal keep-alive HTTP/1.1 client on `asyncio.Protocol` (one pre-built request
  head per target, Content-Length and chunked bodies, the body handed over per socket read).
  It is a measuring stick for "what a lean upstream client would cost", not production code:
  no redirects, no TLS, no proxy, no decompression.
and prints the CPU microseconds this process spent per request (process time / requests).

`server`: starts an aiohttp server configured like gateway/server/runner.py whose handler
answers at once with canned bytes (the fake upstream's answer, as the gateway would send it:
a JSON `web.Response`, or a `StreamResponse`), drives it with wrk like bench.load, and prints
its CPU microseconds per request: the floor of aiohttp's server side (parse, dispatch,
request object, response write) under our handler. The stream is answered three ways: in the
4 socket writes StreamActor makes for a stream that arrives in one upstream read
(`writes=4`: headers, chunks, tail, last chunk), in 3 (headers, body, last chunk) and in 1
(headers held back and sent with the body and the last chunk).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

from bench.fake_upstream import Responses
from bench.load_procs import Pinning
from bench.load_procs import Service
from bench.load_procs import free_port
from bench.load_procs import wait_healthy
from bench.load_report import REPO
from bench.load_wrk import run_wrk

CHUNKS = 20


def _upstream_body(stream: bool) -> bytes:
    body: dict[str, object] = {
        "model": "fake-model",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": stream,
    }
    if stream:
        body["stream_options"] = {"include_usage": True}
    return msgspec.json.encode(body)


# --- clients -------------------------------------------------------------------------------


async def _aiohttp_loop(
    session: aiohttp.ClientSession, url: str, body: bytes, until: float
) -> tuple[int, int]:
    headers = {"Content-Type": "application/json", "Authorization": "Bearer bench-key"}
    if b'"stream":true' in body:
        headers["Accept"] = "text/event-stream"
    loop = asyncio.get_running_loop()
    n = 0
    while loop.time() < until:
        response = await session.request(
            "POST",
            url,
            data=body,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5, connect=None),
            allow_redirects=False,
        )
        assert response.status == 200
        size = 0
        while True:
            data = await response.content.readany()
            if not data:
                break
            size += len(data)
        assert size > 0
        response.release()
        n += 1
    return n, size


class _RawConnection(asyncio.Protocol):
    """One keep-alive connection; `request()` sends a pre-built request and collects the body
    as it arrives (the pieces a gateway would feed its decoder)."""

    def __init__(self) -> None:
        self.transport: Any = None
        self._buf = b""
        self._waiter: asyncio.Future[None] | None = None
        self._head_done = False
        self._chunked = False
        self._remaining = 0  # Content-Length left, or bytes left of the current chunk
        self._pieces: list[bytes] = []
        self._done = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # uvloop's transports are not asyncio.Transport subclasses

    def data_received(self, data: bytes) -> None:
        self._buf = self._buf + data if self._buf else data
        if not self._head_done:
            end = self._buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head = self._buf[:end].lower()
            self._buf = self._buf[end + 4 :]
            self._head_done = True
            assert head.startswith(b"http/1.1 200")
            self._chunked = b"transfer-encoding: chunked" in head
            if not self._chunked:
                at = head.index(b"content-length:") + 15
                end = head.find(b"\r\n", at)
                self._remaining = int(head[at : end if end >= 0 else len(head)])
        if self._chunked:
            self._dechunk()
        else:
            take = self._buf[: self._remaining]
            self._buf = self._buf[len(take) :]
            self._remaining -= len(take)
            if take:
                self._pieces.append(take)
            self._done = self._remaining == 0
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def _dechunk(self) -> None:
        buf = self._buf
        pos = 0
        out = []
        while True:
            if self._remaining:
                take = buf[pos : pos + self._remaining]
                out.append(take)
                pos += len(take)
                self._remaining -= len(take)
                if self._remaining:
                    break
                pos += 2  # CRLF after the chunk data (always present in what we parse)
            nl = buf.find(b"\r\n", pos)
            if nl < 0:
                break
            size = int(buf[pos:nl], 16)
            if size == 0:
                self._done = True
                pos = nl + 4
                break
            self._remaining = size
            pos = nl + 2
        self._buf = buf[pos:]
        if out:
            self._pieces.append(b"".join(out))

    async def read(self) -> bytes:
        """The body bytes received since the last read; b"" at the end of the body."""
        while not self._pieces and not self._done:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self._pieces:
            data = b"".join(self._pieces) if len(self._pieces) > 1 else self._pieces[0]
            self._pieces = []
            return data
        return b""

    def request(self, message: bytes) -> None:
        assert self.transport is not None
        self._head_done = self._chunked = self._done = False
        self._remaining = 0
        self._buf = b""
        self.transport.write(message)


async def _raw_loop(host: str, port: int, message: bytes, until: float) -> tuple[int, int]:
    loop = asyncio.get_running_loop()
    _, conn = await loop.create_connection(_RawConnection, host, port)
    n = 0
    while loop.time() < until:
        conn.request(message)
        size = 0
        while True:
            data = await conn.read()
            if not data:
                break
            size += len(data)
        assert size > 0
        n += 1
    assert conn.transport is not None
    conn.transport.close()
    return n, size


def _raw_message(port: int, body: bytes) -> bytes:
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        "Content-Type: application/json\r\nAuthorization: Bearer bench-key\r\n"
        f"User-Agent: gateway/0.1\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


async def _measure_clients(port: int, seconds: float, concurrency: int) -> dict[str, float]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    results = {}
    sizes: dict[str, set[int]] = {"non-stream": set(), "stream": set()}  # same body either way
    connector = aiohttp.TCPConnector(limit=0, ttl_dns_cache=300, keepalive_timeout=30)
    async with aiohttp.ClientSession(
        connector=connector,
        auto_decompress=True,
        skip_auto_headers=("User-Agent",),
        headers={"User-Agent": "gateway/0.1"},
    ) as session:
        for mode in ("non-stream", "stream"):
            body = _upstream_body(mode == "stream")
            for client in ("aiohttp", "raw"):
                for phase in ("warmup", "measure"):
                    loop = asyncio.get_running_loop()
                    length = 1.0 if phase == "warmup" else seconds
                    until = loop.time() + length
                    cpu0 = time.process_time()
                    if client == "aiohttp":
                        jobs = [
                            _aiohttp_loop(session, url, body, until) for _ in range(concurrency)
                        ]
                    else:
                        message = _raw_message(port, body)
                        jobs = [
                            _raw_loop("127.0.0.1", port, message, until) for _ in range(concurrency)
                        ]
                    done = await asyncio.gather(*jobs)
                    cpu = time.process_time() - cpu0
                counts = [n for n, _ in done]
                sizes[mode].update(size for _, size in done)
                assert len(sizes[mode]) == 1, f"{mode}: body sizes differ: {sizes[mode]}"
                if sum(counts):
                    results[f"{mode} {client}"] = cpu / sum(counts) * 1e6
                    print(
                        f"{mode:<10} {client:<7} {sum(counts) / seconds:>9,.0f} req/s  "
                        f"{cpu / sum(counts) * 1e6:6.1f} us CPU/request",
                        flush=True,
                    )
    return results


def run_clients(seconds: float, concurrency: int) -> int:
    import uvloop

    pinning = Pinning.detect(True)
    if pinning.gateway_cpu is not None:
        import os

        os.sched_setaffinity(0, {pinning.gateway_cpu})
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="floors-"))
    upstream = Service(
        "fake_upstream",
        [
            *pinning.prefix(pinning.load_cpu),
            *(sys.executable, "-m", "bench.fake_upstream", "--port", str(port)),
            *("--chunks", str(CHUNKS)),
        ],
        workdir / "fake_upstream.log",
        cwd=REPO,
    )
    try:
        problem = wait_healthy(upstream, f"http://127.0.0.1:{port}/healthz", 15.0)
        if problem is not None:
            print(problem, file=sys.stderr)
            return 2
        results = uvloop.run(_measure_clients(port, seconds, concurrency))
        print(json.dumps({k: round(v, 1) for k, v in results.items()}))
        return 0
    finally:
        upstream.stop()


# --- server --------------------------------------------------------------------------------


def serve_canned(port: int) -> None:
    """An aiohttp server set up like gateway/server/runner.py, answering canned bytes."""
    import uvloop
    from aiohttp import web

    responses = Responses(CHUNKS, created=1754693439)
    completion = responses.completion.split(b"\r\n\r\n", 1)[1]
    stream_body = responses.stream_plain.split(b"\r\n\r\n", 1)[1]
    events = []  # de-chunk the fake upstream's body back into the SSE bytes
    rest = stream_body
    while True:
        nl = rest.index(b"\r\n")
        size = int(rest[:nl], 16)
        if size == 0:
            break
        events.append(rest[nl + 2 : nl + 2 + size])
        rest = rest[nl + 4 + size :]
    sse = b"".join(events)

    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if b'"stream":true' not in body:
            return web.Response(body=completion, content_type="application/json")
        response = web.StreamResponse(
            status=200,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            },
        )
        if request.query.get("writes") == "1":
            # One socket write: headers held back until the body, the body sent with the
            # terminating chunk (write_eof(data)). aiohttp's private switch, for measuring.
            response._send_headers_immediately = False
            await response.prepare(request)
            await response.write_eof(sse)
            return response
        if request.query.get("writes") == "4":
            # What StreamActor does for a stream that arrives in one read: headers at
            # prepare(), the held-back chunks, the tail ([DONE]), then the last chunk.
            await response.prepare(request)
            await response.write(sse[:-14])
            await response.write(sse[-14:])
            await response.write_eof()
            return response
        await response.prepare(request)
        await response.write(sse)
        await response.write_eof()
        return response

    async def healthz(request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def main() -> None:
        app = web.Application(handler_args={"access_log": None})
        app.router.add_post("/v1/chat/completions", chat)
        app.router.add_get("/healthz", healthz)
        runner = web.AppRunner(app, handler_cancellation=True, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port, backlog=4096)
        await site.start()
        await asyncio.Event().wait()

    uvloop.run(main())


def run_server(seconds: int, connections: int) -> int:
    pinning = Pinning.detect(True)
    port = free_port()
    workdir = Path(tempfile.mkdtemp(prefix="floors-"))
    server = Service(
        "canned_server",
        [
            *pinning.prefix(pinning.gateway_cpu),
            *(sys.executable, "-m", "bench.micro.floors", "_serve", "--port", str(port)),
        ],
        workdir / "server.log",
        cwd=REPO,
    )
    try:
        problem = wait_healthy(server, f"http://127.0.0.1:{port}/healthz", 15.0)
        if problem is not None:
            print(f"{problem}\n{server.log_tail()}", file=sys.stderr)
            return 2
        results = {}
        for mode, query in [
            ("non-stream", ""),
            ("stream", "?writes=4"),
            ("stream", ""),
            ("stream", "?writes=1"),
        ]:
            body = json.dumps(
                {"model": "bench", "messages": [{"role": "user", "content": "hi"}]}
                | {"stream": mode == "stream"},
                separators=(",", ":"),
            ).encode()
            url = f"http://127.0.0.1:{port}/v1/chat/completions{query}"
            label = mode + (f" {query[1:]}" if query else "")
            load = pinning.prefix(pinning.load_cpu)
            run_wrk("canned", url, body, connections, 1, load)  # warm-up
            cpu0 = server.cpu_seconds()
            run = run_wrk("canned", url, body, connections, seconds, load)
            cpu = server.cpu_seconds() - cpu0
            if not run.ok:
                print(f"{label}: {run.problems}", file=sys.stderr)
                return 1
            results[label] = cpu / run.requests * 1e6
            print(
                f"{label:<17} aiohttp server, canned answer: {run.rps:>9,.0f} req/s  "
                f"{results[label]:6.1f} us CPU/request (c={connections})",
                flush=True,
            )
        print(json.dumps({k: round(v, 1) for k, v in results.items()}))
        return 0
    finally:
        server.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.micro.floors")
    parser.add_argument("what", choices=("client", "server", "_serve"))
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--concurrency", "--connections", dest="n", type=int, default=16)
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    if args.what == "client":
        return run_clients(args.seconds, args.n)
    if args.what == "server":
        return run_server(args.seconds, args.n)
    serve_canned(args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
