"""The traffic benchmark's load generator: closed-loop HTTP/1.1 keep-alive connections.

    python -m bench.traffic.client --port 9100 --conns 2000 --procs 2 --duration 20 [...]

Each of `--conns` connections (split over `--procs` processes, each raising its soft
RLIMIT_NOFILE to the hard limit) sends a request, reads the whole answer (sse.ResponseReader),
records it, and sends the next, until `--duration` ends; then requests in flight get up to
`--drain` seconds to finish, and whatever is still running counts as an `unfinished` error.
With `--one-shot` each connection sends exactly one request (held streams). Connections open
at `--ramp-per-s` per second in total (a gateway's accept backlog is small). The request is built
once per process as bytes (wire.request_body plus the head with `--header`s).

Raw asyncio.Protocol clients on uvloop, not aiohttp: 10,000 connections and tens of thousands
of chunks per second have to fit in a part of one core. Prints one line, `TRAFFIC_JSON {...}`,
with the counts and histograms (hist.Histogram.to_dict) that the orchestrator merges.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import sys
import time
from collections import Counter
from typing import Any
from typing import cast

from bench.traffic import wire
from bench.traffic.hist import Histogram
from bench.traffic.sse import ResponseReader

CONNECT_TIMEOUT_S = 10.0
RETRY_PAUSE_S = 0.1  # after a connection error, before the slot tries again


class Stats:
    def __init__(self) -> None:
        self.latency = Histogram()
        self.ttfb = Histogram()
        self.delay = Histogram()
        self.gap = Histogram()
        self.errors: Counter[str] = Counter()
        self.ok = 0
        self.ok_in_window = 0
        self.chunks = 0
        self.bytes_in = 0

    def to_dict(self) -> dict[str, Any]:
        hists = {"latency": self.latency, "ttfb": self.ttfb, "delay": self.delay, "gap": self.gap}
        out: dict[str, Any] = {name: hist.to_dict() for name, hist in hists.items()}
        out.update(errors=dict(self.errors), ok=self.ok, ok_in_window=self.ok_in_window)
        out.update(chunks=self.chunks, bytes_in=self.bytes_in)
        return out


class Load:
    """The settings and shared state of one process's connections."""

    def __init__(self, args: argparse.Namespace, request: bytes) -> None:
        self.args = args
        self.request = request
        self.stats = Stats()
        self.loop = asyncio.get_running_loop()
        self.start = time.monotonic()
        self.end = self.start + args.duration
        self.open: set[Connection] = set()
        self.slots_done = 0
        self.all_done = asyncio.Event()

    def reader(self) -> ResponseReader:
        stats, args = self.stats, self.args
        expect_usage = args.stream
        return ResponseReader(stats.delay, stats.gap, args.tools, args.expect_chunks, expect_usage)

    def more(self) -> bool:
        return time.monotonic() < self.end

    def slot_done(self) -> None:
        self.slots_done += 1
        if self.slots_done >= self.args.conns:
            self.all_done.set()

    def error(self, kind: str) -> None:
        self.stats.errors[kind] += 1

    async def run_slot(self) -> None:
        """One of the connections: (re)connects while there is time and requests left."""
        while True:
            connection = Connection(self)
            try:
                await asyncio.wait_for(
                    self.loop.create_connection(connection.itself, self.args.host, self.args.port),
                    CONNECT_TIMEOUT_S,
                )
            except (TimeoutError, OSError):
                self.error("connect")
                if self.args.one_shot or not self.more():
                    break
                await asyncio.sleep(RETRY_PAUSE_S)
                continue
            await connection.closed
            if connection.sent_one and (self.args.one_shot or not self.more()):
                break
            if not self.more():
                break
            if not connection.sent_one:
                await asyncio.sleep(RETRY_PAUSE_S)
        self.slot_done()


class Connection(asyncio.Protocol):
    """One keep-alive connection sending requests one after another."""

    def __init__(self, load: Load) -> None:
        self.load = load
        self.reader = load.reader()
        self.transport: asyncio.Transport | None = None
        self.closed: asyncio.Future[None] = load.loop.create_future()
        self.in_flight = False
        self.sent_one = False
        self.sent_ns = 0
        self.first_byte_ns = 0

    def itself(self) -> Connection:
        return self  # the protocol factory create_connection wants

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.load.open.add(self)
        self.send()

    def send(self) -> None:
        self.reader.reset()
        self.in_flight = True
        self.sent_one = True
        self.first_byte_ns = 0
        self.sent_ns = time.monotonic_ns()
        cast(asyncio.Transport, self.transport).write(self.load.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        stats = self.load.stats
        stats.bytes_in += len(data)
        if not self.in_flight:
            return  # nothing asked: bytes after an answer (a broken server); ignored
        if not self.first_byte_ns:
            self.first_byte_ns = now
        if self.reader.feed(data, now):
            self.answered(now)

    def answered(self, now: int) -> None:
        load, reader, stats = self.load, self.reader, self.load.stats
        self.in_flight = False
        stats.chunks += reader.chunks
        if reader.kind is None:
            stats.ok += 1
            if time.monotonic() <= load.end:
                stats.ok_in_window += 1
            stats.latency.record_ns(now - self.sent_ns)
            stats.ttfb.record_ns(self.first_byte_ns - self.sent_ns)
        else:
            load.error(reader.kind)
        transport = self.transport
        if transport is None:
            return
        if reader.keep_alive and not load.args.one_shot and load.more():
            self.send()
        else:
            transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.load.open.discard(self)
        self.transport = None
        if self.in_flight:
            now = time.monotonic_ns()
            if self.reader.eof(now) and self.reader.kind is None:
                self.answered(now)  # a body delimited by the close
            else:
                self.in_flight = False
                self.load.stats.chunks += self.reader.chunks
                self.load.error(self.reader.kind or "truncated")
        if not self.closed.done():
            self.closed.set_result(None)


def build_request(args: argparse.Namespace) -> bytes:
    body = wire.request_body(args.model, args.prompt_bytes, args.stream, args.tools)
    head = [
        f"POST {args.path} HTTP/1.1",
        f"Host: {args.host}:{args.port}",
        "Content-Type: application/json",
        "Accept: text/event-stream" if args.stream else "Accept: application/json",
        f"Content-Length: {len(body)}",
        *args.header,
    ]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def run(args: argparse.Namespace) -> dict[str, Any]:
    load = Load(args, build_request(args))
    ramp_pause = 1.0 / args.ramp_per_s if args.ramp_per_s > 0 else 0.0
    slots = []
    for index in range(args.conns):
        if not load.more():
            break
        slots.append(asyncio.ensure_future(load.run_slot()))
        if ramp_pause and index % 10 == 9:
            await asyncio.sleep(ramp_pause * 10)  # timers are ms-grained: ten at a time
    load.args.conns = len(slots)
    if not slots:
        load.all_done.set()
    ramped_s = time.monotonic() - load.start
    with_drain = max(0.0, load.end - time.monotonic()) + args.drain
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(load.all_done.wait(), with_drain)
    for connection in list(load.open):
        if connection.in_flight:
            connection.in_flight = False
            load.stats.chunks += connection.reader.chunks
            load.error("unfinished")
        if connection.transport is not None:
            connection.transport.abort()
    for slot in slots:
        slot.cancel()
    out = load.stats.to_dict()
    out.update(conns=len(slots), ramp_s=ramped_s, elapsed_s=time.monotonic() - load.start)
    return out


def _one_process(args: argparse.Namespace) -> dict[str, Any]:
    import uvloop

    return uvloop.run(run(args))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.traffic.client", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--path", default="/v1/chat/completions")
    parser.add_argument("--header", action="append", default=[], help="'Name: value'")
    parser.add_argument("--model", default=wire.MODEL)
    parser.add_argument("--prompt-bytes", type=int, default=1024)
    parser.add_argument("--no-stream", dest="stream", action="store_false")
    parser.add_argument("--tools", action="store_true")
    parser.add_argument("--conns", type=int, default=100, help="connections over all procs")
    parser.add_argument("--procs", type=int, default=1)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--drain", type=float, default=10.0)
    parser.add_argument("--one-shot", action="store_true")
    parser.add_argument("--expect-chunks", type=int, default=0, help="0: any number")
    parser.add_argument("--ramp-per-s", type=float, default=2000.0)
    args = parser.parse_args(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    procs = max(1, min(args.procs, args.conns))
    share, extra = divmod(args.conns, procs)
    pipes = []
    for index in range(procs):
        conns = share + (1 if index < extra else 0)
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read_fd)
            child = argparse.Namespace(**vars(args))
            child.conns, child.ramp_per_s = conns, args.ramp_per_s / procs
            result = _one_process(child)
            with os.fdopen(write_fd, "w") as pipe:
                json.dump(result, pipe)
            os._exit(0)
        os.close(write_fd)
        pipes.append((pid, read_fd))
    results = []
    for pid, read_fd in pipes:
        with os.fdopen(read_fd) as pipe:
            text = pipe.read()
        os.waitpid(pid, 0)
        results.append(json.loads(text) if text else {"errors": {"client_crashed": 1}})
    print("TRAFFIC_JSON " + json.dumps({"procs": results}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
