"""The bytes of the fake upstream's answers (bench/traffic/upstream.py): HTTP messages, SSE
events split around where a stamp goes, and one paced stream's state.

Everything but the stamp (and the length of its HTTP chunk) is encoded once per process; a
delta is `before + stamp + after`, framed. Tools mode spreads the deltas over the two calls of
wire.TOOL_CALLS, half each: a call's first delta also carries its head (id, name) and the
opening of its arguments, its last one the closing.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING
from typing import Any

import msgspec

from bench.traffic import wire

if TYPE_CHECKING:
    from bench.traffic.upstream import UpstreamProtocol

_encode = msgspec.json.Encoder().encode


class Shape(msgspec.Struct, frozen=True):
    chunks: int = 20
    interval_ms: float = 100.0
    size: int = 20


class _StreamOptions(msgspec.Struct):
    include_usage: bool = False


class Request(msgspec.Struct):
    """The fields that change the answer; msgspec skips the rest (the prompt) in C."""

    stream: bool = False
    stream_options: _StreamOptions | None = None
    tools: list[msgspec.Raw] | None = None


decode_request = msgspec.json.Decoder(Request).decode


def http_message(status: bytes, content_type: bytes, body: bytes) -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        content_type,
        len(body),
        body,
    )


def error(status: bytes, text: str, code: str) -> bytes:
    body = {"error": {"message": text, "type": "invalid_request_error", "code": code}}
    return http_message(status, b"application/json", _encode(body))


NOT_FOUND = error(b"404 Not Found", "not found", "not_found")
BAD_JSON = error(b"400 Bad Request", "body is not a JSON chat request", "bad_json")
BAD_HTTP = error(b"400 Bad Request", "malformed HTTP request", "bad_http")
TOO_LARGE = error(b"413 Payload Too Large", "request too large", "too_large")
HEALTHZ = http_message(b"200 OK", b"text/plain", b"ok\n")
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n\r\n"
)


def frame(event: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(event), event)


class Events:
    """The bytes of every event, split around where a stamp goes; built once per process."""

    def __init__(self, created: int) -> None:
        base = {"id": wire.COMPLETION_ID, "object": "chat.completion.chunk", "created": created}
        base["model"] = wire.MODEL
        self.base = base
        self.role = {
            flag: self._event({"role": "assistant", "content": None}, None, flag) for flag in (0, 1)
        }
        self.stop = {flag: self._event({}, "stop", flag) for flag in (0, 1)}
        self.tools_stop = {flag: self._event({}, "tool_calls", flag) for flag in (0, 1)}
        marker = "@@STAMP@@"
        content = {flag: self._event({"content": marker}, None, flag) for flag in (0, 1)}
        self.content = {flag: tuple(content[flag].split(marker.encode())) for flag in (0, 1)}
        self.args: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        self.call_head: dict[tuple[int, int], bytes] = {}
        for index, (call_id, name, _) in enumerate(wire.TOOL_CALLS):
            for flag in (0, 1):
                head = {"index": index, "id": call_id, "type": "function"}
                head["function"] = {"name": name, "arguments": ""}
                self.call_head[index, flag] = self._event({"tool_calls": [head]}, None, flag)
                delta = {"tool_calls": [{"index": index, "function": {"arguments": marker}}]}
                before, after = self._event(delta, None, flag).split(marker.encode())
                self.args[index, flag] = (before, after)

    def _event(self, delta: dict[str, Any], finish: str | None, with_usage: int) -> bytes:
        chunk = dict(self.base)
        chunk["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]
        if with_usage:
            chunk["usage"] = None  # OpenAI sends "usage": null on all but the usage chunk
        return b"data: " + _encode(chunk) + b"\n\n"

    def usage(self, completion_tokens: int) -> bytes:
        chunk = dict(self.base, choices=[], usage=wire.usage(9, completion_tokens))
        return b"data: " + _encode(chunk) + b"\n\n"

    def completion(self, shape: Shape, tools: bool) -> bytes:
        reply: dict[str, Any] = {"role": "assistant", "refusal": None}
        if tools:
            reply["content"] = None
            reply["tool_calls"] = [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": self.tool_arguments(index, shape)},
                }
                for index, (call_id, name, _) in enumerate(wire.TOOL_CALLS)
            ]
        else:
            reply["content"] = wire.stamp(time.monotonic_ns(), shape.size).decode()
        body = dict(self.base, object="chat.completion")
        body["choices"] = [
            {
                "index": 0,
                "message": reply,
                "logprobs": None,
                "finish_reason": "tool_calls" if tools else "stop",
            }
        ]
        body["usage"] = wire.usage(9, shape.chunks)
        return http_message(b"200 OK", b"application/json", _encode(body))

    @staticmethod
    def tool_arguments(index: int, shape: Shape) -> str:
        pad = wire.stamp(time.monotonic_ns(), shape.size).decode()
        return wire.arguments_open(index) + pad + wire.ARGUMENTS_CLOSE


class Stream:
    """One paced answer: which delta is next, when it is due, where it goes."""

    __slots__ = ("due_ns", "flag", "interval_ns", "next_step", "protocol", "shape", "tools")

    def __init__(self, protocol: UpstreamProtocol, shape: Shape, flag: int, tools: bool) -> None:
        self.protocol = protocol
        if tools and shape.chunks < 2:
            shape = msgspec.structs.replace(shape, chunks=2)  # one delta per call at least
        self.shape = shape
        self.flag = flag
        self.tools = tools
        self.next_step = 0
        self.interval_ns = int(shape.interval_ms * 1_000_000)
        self.due_ns = 0

    def step_bytes(self, events: Events, now_ns: int) -> bytes:
        """Delta number `next_step` (and the end after the last), stamped `now_ns`."""
        step, shape, flag = self.next_step, self.shape, self.flag
        token = wire.stamp(now_ns, shape.size)
        if not self.tools:
            before, after = events.content[flag]
            out = frame(before + token + after)
        else:
            # half the deltas per call: its head and the arguments' opening ride on its first
            per_call = max(1, shape.chunks // 2)
            index = min(step // per_call, 1)
            first = step == index * per_call
            last = step == shape.chunks - 1 or (index == 0 and step == per_call - 1)
            text = token.decode()
            if first:
                text = wire.arguments_open(index) + text
            if last:
                text += wire.ARGUMENTS_CLOSE
            before, after = events.args[index, flag]
            out = b"" if not first else frame(events.call_head[index, flag])
            out += frame(before + text.replace('"', '\\"').encode() + after)
        if step == shape.chunks - 1:
            out += frame((events.tools_stop if self.tools else events.stop)[flag])
            if flag:
                out += frame(events.usage(shape.chunks))
            out += frame(b"data: [DONE]\n\n") + b"0\r\n\r\n"
        self.next_step = step + 1
        return out
