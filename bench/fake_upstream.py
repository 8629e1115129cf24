"""A fast fake OpenAI Chat Completions upstream for the load benchmark.

    python -m bench.fake_upstream --port 9100 [--host 127.0.0.1] [--chunks 20]

Routes:
  POST /v1/chat/completions   ``"stream": true`` -> SSE in OpenAI's exact chunk shape (role chunk,
                              N content chunks, finish chunk, a ``choices: []`` usage chunk when
                              ``stream_options.include_usage`` is true, ``data: [DONE]``), sent
                              with chunked transfer encoding in one write; otherwise one
                              ``chat.completion`` JSON with usage.
  GET  /healthz               200 ``ok``
  POST /v1/traces             200, an empty OTLP/HTTP export response (the gateway's traces)

It must never be the bottleneck of a benchmark, so it is a raw ``asyncio.Protocol`` on uvloop that
parses only what it needs (request line, headers, a Content-Length body), keeps connections alive
(HTTP/1.1, pipelining included) and writes response bytes that were all encoded at start-up. The
one per-request cost is decoding the two fields of the request body it looks at. It prints one
line at start-up and nothing per request.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
import time
from http import HTTPStatus
from typing import cast

import msgspec

from bench.traffic.wire import usage

MODEL = "fake-model"
COMPLETION_ID = "chatcmpl-bench"
TOKEN = "tok "
PROMPT_TOKENS = 9
MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 16 * 1024 * 1024


class _StreamOptions(msgspec.Struct):
    include_usage: bool = False


class _ChatRequest(msgspec.Struct):
    """The only fields of a chat request that change the answer; the rest are ignored."""

    stream: bool = False
    stream_options: _StreamOptions | None = None


_decode_request = msgspec.json.Decoder(_ChatRequest).decode
_encode = msgspec.json.Encoder().encode


class Responses:
    """Every response this server sends, as complete HTTP/1.1 messages encoded once."""

    def __init__(self, chunks: int, created: int) -> None:
        self.created = created
        self.chunks = chunks
        self.completion = self._json_message(200, _encode(self._completion()))
        self.stream_plain = self._sse_message(self._stream_events(include_usage=False))
        self.stream_usage = self._sse_message(self._stream_events(include_usage=True))
        self.healthz = self._message(200, b"text/plain", b"ok\n")
        # an empty ExportTraceServiceResponse: the gateway's OTLP exporter (bench.load
        # --observe tracing) is answered here, as a collector that keeps up would
        self.traces_taken = self._message(200, b"application/x-protobuf", b"")
        self.not_found = self._json_error(404, "not found")
        self.not_allowed = self._json_error(405, "method not allowed")
        self.bad_json = self._json_error(400, "request body is not a JSON chat request")
        self.bad_request = self._json_error(400, "malformed HTTP request")
        self.too_large = self._json_error(413, "request too large")

    def _usage(self) -> dict[str, object]:
        return usage(PROMPT_TOKENS, self.chunks)

    def _completion(self) -> dict[str, object]:
        message = {"role": "assistant", "content": TOKEN * self.chunks, "refusal": None}
        return {
            "id": COMPLETION_ID,
            "object": "chat.completion",
            "created": self.created,
            "model": MODEL,
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
            ],
            "usage": self._usage(),
        }

    def _chunk(
        self, delta: dict[str, object], finish: str | None, include_usage: bool
    ) -> dict[str, object]:
        chunk: dict[str, object] = {
            "id": COMPLETION_ID,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": MODEL,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            # OpenAI puts "usage": null on every chunk but the last when usage was asked for.
            chunk["usage"] = None
        return chunk

    def _stream_events(self, include_usage: bool) -> list[bytes]:
        chunks = [self._chunk({"role": "assistant", "content": None}, None, include_usage)]
        chunks += [self._chunk({"content": TOKEN}, None, include_usage)] * self.chunks
        chunks.append(self._chunk({}, "stop", include_usage))
        if include_usage:
            usage_chunk = self._chunk({}, None, include_usage=False)
            usage_chunk["choices"] = []
            usage_chunk["usage"] = self._usage()
            chunks.append(usage_chunk)
        events = [b"data: " + _encode(chunk) + b"\n\n" for chunk in chunks]
        events.append(b"data: [DONE]\n\n")
        return events

    @staticmethod
    def _message(status: int, content_type: bytes, body: bytes) -> bytes:
        reason = HTTPStatus(status).phrase.encode()
        head = b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n" % (
            status,
            reason,
            content_type,
            len(body),
        )
        return head + body

    def _json_message(self, status: int, body: bytes) -> bytes:
        return self._message(status, b"application/json", body)

    def _json_error(self, status: int, message: str) -> bytes:
        error = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
        return self._json_message(status, _encode(error))

    @staticmethod
    def _sse_message(events: list[bytes]) -> bytes:
        # One HTTP chunk per SSE event, so a client sees real chunked framing.
        head = (
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        body = b"".join(b"%x\r\n%s\r\n" % (len(event), event) for event in events)
        return head + body + b"0\r\n\r\n"


class _Head(msgspec.Struct):
    """What the server needs from a request head."""

    method: bytes
    path: bytes
    content_length: int
    keep_alive: bool
    expect_continue: bool


def parse_head(head: bytes) -> _Head | None:
    """Parses a request line and headers (without the blank line); None if malformed."""
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
        return None
    method, target, version = parts
    keep_alive = version == b"HTTP/1.1"
    expect_continue = False
    content_length = 0
    for line in lines[1:]:
        name, sep, value = line.partition(b":")
        if not sep:
            return None
        name = name.strip().lower()
        if name == b"content-length":
            try:
                content_length = int(value.strip())
            except ValueError:
                return None
            if content_length < 0:
                return None
        elif name == b"connection":
            token = value.strip().lower()
            if token == b"close":
                keep_alive = False
            elif token == b"keep-alive":
                keep_alive = True
        elif name == b"expect":
            expect_continue = value.strip().lower() == b"100-continue"
        elif name == b"transfer-encoding":
            return None  # chunked request bodies are not needed by any client we drive
    path = target.split(b"?", 1)[0]
    return _Head(method, path, content_length, keep_alive, expect_continue)


class FakeUpstreamProtocol(asyncio.Protocol):
    """One connection: buffers bytes, answers every complete request in order."""

    __slots__ = ("_buffer", "_closing", "_continued", "_responses", "_transport")

    def __init__(self, responses: Responses) -> None:
        self._responses = responses
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._closing = False
        self._continued = False  # sent "100 Continue" for the request being read

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, hence a cast, not a check.
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None

    def data_received(self, data: bytes) -> None:
        if self._closing:
            return
        self._buffer += data
        while self._buffer and not self._closing:
            if not self._answer_one():
                return

    def _answer_one(self) -> bool:
        """Answers the first buffered request; False when more bytes are needed."""
        buffer = self._buffer
        head_end = buffer.find(b"\r\n\r\n")
        if head_end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                self._send(self._responses.too_large, keep_alive=False)
            return False
        head = parse_head(bytes(buffer[:head_end]))
        if head is None:
            self._send(self._responses.bad_request, keep_alive=False)
            return False
        if head.content_length > MAX_BODY_BYTES:
            self._send(self._responses.too_large, keep_alive=False)
            return False
        body_start = head_end + 4
        body_end = body_start + head.content_length
        if len(buffer) < body_end:
            if head.expect_continue and not self._continued and self._transport is not None:
                self._continued = True  # curl asks for this before larger bodies
                self._transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            return False
        body = bytes(buffer[body_start:body_end])
        del buffer[:body_end]
        self._continued = False
        self._send(self._route(head, body), head.keep_alive)
        return True

    def _route(self, head: _Head, body: bytes) -> bytes:
        responses = self._responses
        if head.path in (b"/v1/chat/completions", b"/chat/completions"):
            if head.method != b"POST":
                return responses.not_allowed
            try:
                request = _decode_request(body)
            except msgspec.DecodeError:
                return responses.bad_json
            if not request.stream:
                return responses.completion
            options = request.stream_options
            if options is not None and options.include_usage:
                return responses.stream_usage
            return responses.stream_plain
        if head.path == b"/healthz":
            return responses.healthz if head.method == b"GET" else responses.not_allowed
        if head.path == b"/v1/traces":
            return responses.traces_taken if head.method == b"POST" else responses.not_allowed
        return responses.not_found

    def _send(self, message: bytes, keep_alive: bool) -> None:
        transport = self._transport
        if transport is None:
            return
        transport.write(message)
        if not keep_alive:
            self._closing = True
            self._buffer.clear()
            transport.close()


async def serve(host: str, port: int, chunks: int) -> None:
    """Serves until SIGTERM or SIGINT."""
    responses = Responses(chunks, created=int(time.time()))
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: FakeUpstreamProtocol(responses), host, port, backlog=4096, reuse_address=True
    )
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    print(f"fake upstream listening on http://{host}:{port} ({chunks} chunks)", flush=True)
    async with server:
        await stop.wait()


def _run(host: str, port: int, chunks: int) -> None:
    try:
        import uvloop
    except ImportError:  # still correct without it, only slower
        asyncio.run(serve(host, port, chunks))
    else:
        uvloop.run(serve(host, port, chunks))


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(prog="python -m bench.fake_upstream", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=20, help="content chunks per stream")
    args = parser.parse_args(argv)
    if args.chunks < 1:
        parser.error("--chunks must be at least 1")
    with contextlib.suppress(KeyboardInterrupt):
        _run(args.host, args.port, args.chunks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
