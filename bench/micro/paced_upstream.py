"""A fake upstream that paces long streams: bench/micro/long_streams.py's other end.

    python -m bench.micro.paced_upstream --port 9100 [--chunks 20] [--interval 0.1]
        [--size 32] [--burst 1]

`POST /v1/chat/completions` answers OpenAI chat SSE and `POST /v1/messages` Anthropic
Messages SSE, both with chunked transfer encoding: the opening event(s) at once, then
`--chunks` content events, `--burst` of them per write every `--interval` seconds, then the
end (OpenAI: finish, usage chunk, `[DONE]`; Anthropic: block stop, message delta, message
stop). Each content event's text starts with `@<CLOCK_MONOTONIC ns>@` (the time it was
written) and is padded to `--size` bytes, so the client measures what the path between
adds to every chunk on one clock. A body without `"stream":true` (or `"stream": true`) gets
a small completion at once. `GET /healthz` answers 200 (the direct baseline of the lag probe).

A raw asyncio Protocol on uvloop with one `call_later` handle per stream (no task), so it
holds 10,000 streams on a fraction of a core; it prints one line at start and nothing per
request.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import uvloop

_CHAT_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n"
)
_OPENAI_ID = b'{"id":"chatcmpl-paced","object":"chat.completion.chunk","created":1,"model":"m",'
_OPENAI_OPEN = (
    b"data: "
    + _OPENAI_ID
    + b'"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}\n\n'
)
_OPENAI_DELTA = (
    b"data: "
    + _OPENAI_ID
    + b'"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}\n\n'
)
_OPENAI_END = (
    b"data: "
    + _OPENAI_ID
    + b'"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    + b"data: "
    + _OPENAI_ID
    + b'"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":%d,"total_tokens":%d}}\n\n'
    + b"data: [DONE]\n\n"
)
_ANTHROPIC_OPEN = (
    b'event: message_start\ndata: {"type":"message_start","message":{"id":"msg_paced",'
    b'"type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,'
    b'"usage":{"input_tokens":9,"output_tokens":1}}}\n\n'
    b'event: content_block_start\ndata: {"type":"content_block_start","index":0,'
    b'"content_block":{"type":"text","text":""}}\n\n'
)
_ANTHROPIC_DELTA = (
    b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,'
    b'"delta":{"type":"text_delta","text":"%s"}}\n\n'
)
_ANTHROPIC_END = (
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b'event: message_delta\ndata: {"type":"message_delta","delta":{"stop_reason":"end_turn",'
    b'"stop_sequence":null},"usage":{"output_tokens":%d}}\n\n'
    b'event: message_stop\ndata: {"type":"message_stop"}\n\n'
)
_COMPLETION = (
    b'{"id":"chatcmpl-paced","object":"chat.completion","created":1,"model":"m","choices":'
    b'[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],'
    b'"usage":{"prompt_tokens":9,"completion_tokens":1,"total_tokens":10}}'
)
_MESSAGE = (
    b'{"id":"msg_paced","type":"message","role":"assistant","model":"m","content":'
    b'[{"type":"text","text":"ok"}],"stop_reason":"end_turn","stop_sequence":null,'
    b'"usage":{"input_tokens":9,"output_tokens":1}}'
)


def _json_answer(body: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
        len(body),
        body,
    )


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


class Settings:
    __slots__ = ("burst", "chunks", "interval", "size")

    def __init__(self, chunks: int, interval: float, size: int, burst: int) -> None:
        self.chunks, self.interval, self.size, self.burst = chunks, interval, size, max(burst, 1)


class PacedStream(asyncio.Protocol):
    """One connection: requests one after another (keep-alive), each answered paced."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.need = 0  # body bytes of the current request still to come (-1: reading a head)
        self.head = b""
        self.sent = 0
        self.anthropic = False
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.need = -1

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.transport = None

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.transport is not None:
            if self.need < 0:
                end = self.buffer.find(b"\r\n\r\n")
                if end < 0:
                    return
                self.head = bytes(self.buffer[:end]).lower()
                del self.buffer[: end + 4]
                at = self.head.find(b"content-length:")
                self.need = int(self.head[at + 15 :].split(b"\r\n", 1)[0]) if at >= 0 else 0
            if len(self.buffer) < self.need:
                return
            body = bytes(self.buffer[: self.need])
            del self.buffer[: self.need]
            self.need = -1
            self._answer(self.head, body)

    def _answer(self, head: bytes, body: bytes) -> None:
        assert self.transport is not None
        if head.startswith(b"get /healthz"):
            self.transport.write(_json_answer(b'{"status":"ok"}'))
            return
        self.anthropic = b"/v1/messages" in head.split(b"\r\n", 1)[0]
        if b'"stream":true' not in body and b'"stream": true' not in body:
            self.transport.write(_json_answer(_MESSAGE if self.anthropic else _COMPLETION))
            return
        opening = _ANTHROPIC_OPEN if self.anthropic else _OPENAI_OPEN
        self.transport.write(_CHAT_HEAD + _chunk(opening))
        self.sent = 0
        self._tick()

    def _tick(self) -> None:
        self.timer = None
        transport, settings = self.transport, self.settings
        if transport is None:
            return
        if self.sent >= settings.chunks:
            n = settings.chunks
            end = _ANTHROPIC_END % n if self.anthropic else _OPENAI_END % (n, n + 9)
            transport.write(_chunk(end) + b"0\r\n\r\n")
            return
        delta = _ANTHROPIC_DELTA if self.anthropic else _OPENAI_DELTA
        events = []
        for _ in range(min(settings.burst, settings.chunks - self.sent)):
            text = b"@%d@" % time.monotonic_ns()
            events.append(delta % (text + b"x" * max(settings.size - len(text), 0)))
            self.sent += 1
        transport.write(_chunk(b"".join(events)))
        self.timer = self.loop.call_later(settings.interval, self._tick)


async def serve(host: str, port: int, settings: Settings) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: PacedStream(settings), host, port, backlog=16384)
    print(f"paced upstream on http://{host}:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.micro.paced_upstream")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=20, help="content events per stream")
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between writes")
    parser.add_argument("--size", type=int, default=32, help="bytes of text per content event")
    parser.add_argument("--burst", type=int, default=1, help="content events per write")
    args = parser.parse_args(argv)
    settings = Settings(args.chunks, args.interval, args.size, args.burst)
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    uvloop.run(serve(args.host, args.port, settings))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
