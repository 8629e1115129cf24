"""long_streams.py's client side: raw asyncio Protocols holding many streams, and the
/healthz probe.

One `StreamClient` per connection (aiohttp's client costs too much per connection to hold
10,000 from one core). It does not parse SSE or chunked framing: it finds the upstream's
write stamps (`@<ns>@`, see paced_upstream.py) in what arrives, for the delay each chunk
picked up on the way, and the end of the chunked body (`0\\r\\n\\r\\n` after `[DONE]` or
Anthropic's `message_stop`) for the end of a stream; a status other than 200, an `"error"`
in the body or a connection lost mid-stream is an error.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import re
import time
from array import array

_STAMP = re.compile(rb"@(\d{6,})@")
_END = b"\r\n0\r\n\r\n"
_TAIL = 40  # bytes of one read kept for the next: a stamp or the end split across reads


def percentile(values: list[float] | list[int], p: float) -> float:
    """The p-th percentile of sorted `values` (nearest rank); 0 for none."""
    if not values:
        return 0.0
    index = min(len(values) - 1, max(0, round(p / 100 * len(values)) - 1))
    return float(values[index])


class Run:
    """What all the connections of one run count together."""

    def __init__(
        self, request: bytes, chunks: int, repeat_until: float, max_streams: int = 1 << 62
    ) -> None:
        self.request = request
        self.chunks_expected = chunks
        self.repeat_until = repeat_until  # monotonic time; a stream that ends before it repeats
        self.max_streams = max_streams
        self.started_streams = 0
        self.ok = 0
        self.errors = 0
        self.error_kinds: collections.Counter[str] = collections.Counter()
        self.open = 0
        self.connections = 0
        self.expected = 0
        self.chunks = 0
        self.delays_ns = array("q")
        self.gaps_ns = array("q")
        self.latencies_ms: list[float] = []
        self.all_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def error(self, kind: str) -> None:
        self.errors += 1
        self.error_kinds[kind] += 1

    def closed(self) -> None:
        self.connections -= 1
        if self.connections == 0 and self.expected and not self.all_done.done():
            self.all_done.set_result(None)


class StreamClient(asyncio.Protocol):
    def __init__(self, run: Run) -> None:
        self.run = run
        self.transport: asyncio.Transport | None = None
        self.in_head = True
        self.head = b""
        self.tail = b""
        self.done_seen = False
        self.streaming = False
        self.last = 0
        self.sent_at = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.run.connections += 1
        self._send()

    def _send(self) -> None:
        run = self.run
        assert self.transport is not None
        run.started_streams += 1
        run.open += 1
        self.streaming, self.in_head, self.head, self.tail = True, True, b"", b""
        self.done_seen, self.last = False, 0
        self.sent_at = time.perf_counter()
        self.transport.write(run.request)

    def data_received(self, data: bytes) -> None:
        now = time.monotonic_ns()
        run = self.run
        if self.in_head:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            if self.head[9:12] != b"200":
                self._fail("status " + self.head[9:12].decode(errors="replace"))
                return
            data, self.in_head = self.head[end + 4 :], False
        text = self.tail + data if self.tail else data
        found = 0
        last_end = 0
        for match in _STAMP.finditer(text):
            run.delays_ns.append(now - int(match.group(1)))
            found += 1
            last_end = match.end()
        if found:
            run.chunks += found
            if self.last:
                run.gaps_ns.append(now - self.last)
            self.last = now
        if b'"error"' in text:
            self._fail("error event")
            return
        if b"[DONE]" in text or b"message_stop" in text:
            self.done_seen = True
        if self.done_seen and _END in text:
            self._finished()
            return
        self.tail = text[max(last_end, len(text) - _TAIL) :]

    def _finished(self) -> None:
        run = self.run
        run.ok += 1
        run.open -= 1
        self.streaming = False
        run.latencies_ms.append((time.perf_counter() - self.sent_at) * 1e3)
        if time.monotonic() < run.repeat_until and run.started_streams < run.max_streams:
            self._send()
        elif self.transport is not None:
            self.transport.close()

    def _fail(self, kind: str) -> None:
        self.run.error(kind)
        self.run.open -= 1
        self.streaming = False
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.streaming:
            self._fail("connection lost")
        self.transport = None
        self.run.closed()


async def open_streams(
    loop: asyncio.AbstractEventLoop, port: int, run: Run, conns: int, ramp: float
) -> None:
    """Open `conns` connections, `ramp` a second (in batches every 10 ms)."""
    run.expected = conns
    batch = max(1, int(ramp / 100))
    opened = 0
    started = time.monotonic()
    while opened < conns:
        count = min(batch, conns - opened)
        results = await asyncio.gather(
            *(
                loop.create_connection(lambda: StreamClient(run), "127.0.0.1", port)
                for _ in range(count)
            ),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                run.error("connect: " + type(result).__name__)
        opened += count
        delay = started + opened / ramp - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
    if run.connections == 0 and not run.all_done.done():
        run.all_done.set_result(None)


class Probe:
    """GET /healthz at 20 Hz on one keep-alive connection: the gateway's event-loop lag."""

    def __init__(self, loop: asyncio.AbstractEventLoop, port: int) -> None:
        self.loop, self.port = loop, port
        self.latencies_ms: list[float] = []
        self.at: list[float] = []  # monotonic time of each probe's answer
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.port)
        self._task = asyncio.create_task(self._probe(reader, writer))

    async def _probe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
        try:
            while True:
                t = time.perf_counter()
                writer.write(request)
                head = await reader.readuntil(b"\r\n\r\n")
                at = head.lower().find(b"content-length:")
                await reader.readexactly(int(head[at + 15 :].split(b"\r\n", 1)[0]))
                took = time.perf_counter() - t
                self.latencies_ms.append(took * 1e3)
                self.at.append(time.monotonic())
                await asyncio.sleep(max(0.0, 0.05 - took))
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, OSError, asyncio.IncompleteReadError):
                await self._task

    def between(self, start: float, end: float) -> list[float]:
        """The probes answered between two monotonic times, sorted."""
        return sorted(
            ms for ms, at in zip(self.latencies_ms, self.at, strict=True) if start <= at <= end
        )
