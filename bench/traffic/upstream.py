"""A paced fake OpenAI Chat Completions upstream for the traffic benchmark.

    python -m bench.traffic.upstream --port 9100 --stats-port 9200 [--procs 2]
        [--chunks 20] [--interval-ms 100] [--size 20] [--tick-ms 2]

POST /v1/chat/completions answers in OpenAI's exact shape. A stream is the role chunk and the
first delta at once, then one delta every `interval` ms (the *pacing*), then the finish chunk
(`stop`, or `tool_calls` when the request has `tools`), the `choices: []` usage chunk when
`stream_options.include_usage`, `data: [DONE]`; chunked transfer encoding, one HTTP chunk per
event. Content deltas carry stamps (bench/traffic/wire.py); a request with `tools` gets two
parallel calls whose argument deltas carry them. A non-stream request gets one
`chat.completion`. The shape comes from the command line, or per request from a header
`x-bench-shape: chunks=N,interval_ms=X,size=B` (which only a direct client can send).

It must not be the bottleneck: `--procs` processes share the port with SO_REUSEPORT, each a raw
asyncio.Protocol on uvloop. The event bytes around the stamp are encoded once. One timer per
process paces every stream: a due-list keyed by tick (`--tick-ms`), one loop timer armed for the
earliest tick, each firing writing every delta due. How late each delta went out (send - due)
is its *lateness*, kept in a histogram that `GET /stats` on the process's own stats port
(`--stats-port` + process index) returns as JSON and resets: the run's proof that the upstream
kept up. Bodies up to 16 MB are buffered by C code (bytearray, one search for the head end).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import heapq
import os
import signal
import sys
import time
from typing import Any
from typing import cast

import msgspec

from bench.traffic.answers import BAD_HTTP
from bench.traffic.answers import BAD_JSON
from bench.traffic.answers import HEALTHZ
from bench.traffic.answers import NOT_FOUND
from bench.traffic.answers import STREAM_HEAD
from bench.traffic.answers import TOO_LARGE
from bench.traffic.answers import Events
from bench.traffic.answers import Shape
from bench.traffic.answers import Stream
from bench.traffic.answers import decode_request
from bench.traffic.answers import frame
from bench.traffic.answers import http_message
from bench.traffic.hist import Histogram

MAX_HEAD_BYTES = 64 * 1024
EARLY_NS = 250_000
MAX_BODY_BYTES = 16 * 1024 * 1024
CHAT_PATHS = (b"/v1/chat/completions", b"/chat/completions")
_encode = msgspec.json.Encoder().encode


class Pacer:
    """The one timer of a process: streams waiting for their next delta, by due tick."""

    def __init__(self, loop: asyncio.AbstractEventLoop, events: Events, tick_ms: float) -> None:
        self.loop = loop
        self.events = events
        self.tick_ns = int(tick_ms * 1_000_000)
        self.due: dict[int, list[Stream]] = {}
        self.ticks: list[int] = []  # heap of the keys of `due`
        self.armed_tick: int | None = None
        self.firing = False
        self.handle: asyncio.TimerHandle | None = None
        self.lateness = Histogram()
        self.chunks_sent = 0
        self.streams = 0

    def add(self, stream: Stream) -> None:
        tick = -(-stream.due_ns // self.tick_ns)  # ceiling: never early
        bucket = self.due.get(tick)
        if bucket is None:
            self.due[tick] = [stream]
            heapq.heappush(self.ticks, tick)
            if not self.firing and (self.armed_tick is None or tick < self.armed_tick):
                self._arm(tick)
        else:
            bucket.append(stream)

    def _arm(self, tick: int) -> None:
        if self.handle is not None:
            self.handle.cancel()
        self.armed_tick = tick
        # whole milliseconds, rounded up: libuv's timers are ms-grained, and a timer armed for
        # 0.4 ms would fire at once, find nothing due and re-arm: a busy loop until the tick
        remaining_ns = tick * self.tick_ns - time.monotonic_ns()
        delay_ms = -(-remaining_ns // 1_000_000) if remaining_ns > 0 else 0
        self.handle = self.loop.call_later(delay_ms / 1000.0, self._fire)

    def _fire(self) -> None:
        self.handle = None
        self.armed_tick = None
        self.firing = True  # streams re-added meanwhile do not arm; the heap's head does, below
        now = time.monotonic_ns()
        # libuv's cached loop time can make a timer fire a little early: count what is due
        # within EARLY_NS as due (its stamp is taken now, so no delay figure changes)
        now_tick = (now + EARLY_NS) // self.tick_ns
        ticks, due, events, record = self.ticks, self.due, self.events, self.lateness.record_ns
        while ticks and ticks[0] <= now_tick:
            for stream in due.pop(heapq.heappop(ticks)):
                protocol = stream.protocol
                if protocol.transport is None:
                    continue  # the client went away; the stream ends here
                record(now - stream.due_ns)
                protocol.transport.write(stream.step_bytes(events, now))
                self.chunks_sent += 1
                if stream.next_step < stream.shape.chunks:
                    stream.due_ns += stream.interval_ns
                    self.add(stream)
                else:
                    protocol.stream_done()
        self.firing = False
        if ticks:
            self._arm(ticks[0])

    def stats(self) -> bytes:
        body = {"pid": os.getpid(), "lateness": self.lateness.to_dict()}
        body.update(chunks_sent=self.chunks_sent, streams=self.streams)
        self.lateness, self.chunks_sent, self.streams = Histogram(), 0, 0
        return http_message(b"200 OK", b"application/json", _encode(body))


def _header_shape(value: bytes, default: Shape) -> Shape:
    fields: dict[str, Any] = {}
    for item in value.decode("latin-1").split(","):
        key, _, number = item.strip().partition("=")
        if key in ("chunks", "size"):
            fields[key] = int(number)
        elif key == "interval_ms":
            fields[key] = float(number)
    return msgspec.structs.replace(default, **fields)


class UpstreamProtocol(asyncio.Protocol):
    """One connection: reads requests in order; one answer at a time (streams included)."""

    def __init__(self, pacer: Pacer, shape: Shape) -> None:
        self.pacer = pacer
        self.shape = shape
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None
        self.streaming = False
        self.close_after = False
        self.pending: tuple[int, bytes, bytes, int, bool, bytes] | None = None  # parsed head

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while not self.streaming and self.transport is not None and self._answer_one():
            pass

    def stream_done(self) -> None:
        self.streaming = False
        if self.close_after:
            self._close_with(b"")
        while not self.streaming and self.transport is not None and self._answer_one():
            pass

    def _answer_one(self) -> bool:
        buffer = self.buffer
        if self.pending is None:
            head_end = buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
            if head_end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    self._close_with(TOO_LARGE)
                return False
            parsed = _parse_head(bytes(buffer[:head_end]))
            if parsed is None:
                self._close_with(BAD_HTTP)
                return False
            if parsed[2] > MAX_BODY_BYTES:
                self._close_with(TOO_LARGE)
                return False
            self.pending = (head_end + 4, *parsed)
        body_start, method, path, length, keep_alive, shape_header = self.pending
        if len(buffer) < body_start + length:
            return False  # wait for the rest of the body: no search, no copy until then
        body = bytes(buffer[body_start : body_start + length])
        del buffer[: body_start + length]
        self.pending = None
        self.close_after = not keep_alive
        self._route(method, path, body, shape_header)
        if self.close_after and not self.streaming:
            self._close_with(b"")
        return True

    def _route(self, method: bytes, path: bytes, body: bytes, shape_header: bytes) -> None:
        transport = cast(asyncio.Transport, self.transport)
        if path in CHAT_PATHS and method == b"POST":
            try:
                request = decode_request(body)
            except msgspec.DecodeError:
                transport.write(BAD_JSON)
                return
            shape = _header_shape(shape_header, self.shape) if shape_header else self.shape
            tools = bool(request.tools)
            if not request.stream:
                transport.write(self.pacer.events.completion(shape, tools))
                return
            options = request.stream_options
            flag = 1 if options is not None and options.include_usage else 0
            self._start_stream(Stream(self, shape, flag, tools))
        elif path == b"/healthz":
            transport.write(HEALTHZ)
        elif path == b"/stats":
            transport.write(self.pacer.stats())
        else:
            transport.write(NOT_FOUND)

    def _start_stream(self, stream: Stream) -> None:
        pacer, events = self.pacer, self.pacer.events
        transport = cast(asyncio.Transport, self.transport)
        now = time.monotonic_ns()
        pacer.streams += 1
        pacer.chunks_sent += 1
        first = stream.step_bytes(events, now)
        transport.write(STREAM_HEAD + frame(events.role[stream.flag]) + first)
        if stream.next_step >= stream.shape.chunks:
            return
        if stream.interval_ns <= 0:  # unpaced: the whole answer in one write
            rest = [stream.step_bytes(events, now) for _ in range(stream.shape.chunks - 1)]
            pacer.chunks_sent += len(rest)
            transport.write(b"".join(rest))
            return
        self.streaming = True
        stream.due_ns = now + stream.interval_ns
        pacer.add(stream)

    def _close_with(self, message: bytes) -> None:
        if self.transport is not None:
            if message:
                self.transport.write(message)
            self.transport.close()
            self.transport = None


def _parse_head(head: bytes) -> tuple[bytes, bytes, int, bool, bytes] | None:
    """method, path, Content-Length, keep-alive, x-bench-shape; None if malformed."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return None
    keep_alive = parts[2] == b"HTTP/1.1"
    length, shape = 0, b""
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            return None
        name = name.strip().lower()
        if name == b"content-length":
            if not value.strip().isdigit():
                return None
            length = int(value)
        elif name == b"connection":
            keep_alive = value.strip().lower() != b"close"
        elif name == b"x-bench-shape":
            shape = value.strip()
        elif name == b"transfer-encoding":
            return None  # no client we drive sends a chunked request body
    return parts[0], parts[1].split(b"?", 1)[0], length, keep_alive, shape


async def serve(port: int, stats_port: int, shape: Shape, tick_ms: float) -> None:
    loop = asyncio.get_running_loop()
    pacer = Pacer(loop, Events(int(time.time())), tick_ms)
    server = await loop.create_server(
        lambda: UpstreamProtocol(pacer, shape), "127.0.0.1", port, backlog=4096, reuse_port=True
    )
    stats = await loop.create_server(
        lambda: UpstreamProtocol(pacer, shape), "127.0.0.1", stats_port
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    async with server, stats:
        await stop.wait()


def _raise_nofile() -> None:
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.traffic.upstream", description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--stats-port", type=int, required=True, help="process i: this + i")
    parser.add_argument("--procs", type=int, default=2)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--interval-ms", type=float, default=100.0)
    parser.add_argument("--size", type=int, default=20, help="content bytes per delta")
    parser.add_argument("--tick-ms", type=float, default=1.0, help="the pacing timer's tick (>= 1)")
    args = parser.parse_args(argv)
    shape = Shape(max(1, args.chunks), args.interval_ms, args.size)
    _raise_nofile()
    import uvloop

    children = []
    for index in range(1, args.procs):
        pid = os.fork()
        if pid == 0:
            uvloop.run(serve(args.port, args.stats_port + index, shape, args.tick_ms))
            os._exit(0)
        children.append(pid)

    def stop_children(signum: int, frame: object) -> None:
        for pid in children:  # only the processes this one forked, by their id
            os.kill(pid, signal.SIGTERM)

    signal.signal(signal.SIGTERM, stop_children)
    print(
        f"traffic upstream on 127.0.0.1:{args.port}, {args.procs} procs, {shape!r}",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        uvloop.run(serve(args.port, args.stats_port, shape, args.tick_ms))
    stop_children(signal.SIGTERM, None)
    for pid in children:
        os.waitpid(pid, 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
