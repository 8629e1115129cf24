"""The client's reader of one HTTP/1.1 response: head, chunked or Content-Length body, SSE
events, and the checks that make an answer right or an error of some kind.

`ResponseReader.feed(data, now_ns)` takes bytes as they arrive, split anywhere, and says when
the response is complete; `kind` is then None (a right answer) or the error kind. Each stamp
(bench/traffic/wire.py) found in a content or arguments delta gives one *chunk*: its added
delay (receive time minus the stamp) and its gap since the stream's previous chunk go into the
histograms the reader was given. Events are decoded with msgspec into Structs that name only the
fields checked, so a chunk costs a few microseconds of Python.

Error kinds: `status_<code>:<error code or type>`, `bad_http`, `bad_json`, `stream_error:<code>`,
`no_done`, `bad_finish`, `no_usage`, `missing_chunks`, `tools_mismatch`, and from the
connection (client.py) `connect`, `truncated` (closed before the end), `unfinished` (still
running at the drain bound).
"""

from __future__ import annotations

import msgspec

from bench.traffic import wire
from bench.traffic.hist import Histogram


class _Function(msgspec.Struct):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct):
    index: int | None = None
    id: str | None = None
    function: _Function | None = None


class _Delta(msgspec.Struct):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    message: _Delta | None = None  # a chat.completion's message has the same two fields
    finish_reason: str | None = None


class _Error(msgspec.Struct):
    code: str | int | None = None
    type: str | None = None


class _Body(msgspec.Struct):
    """A stream chunk, a whole chat.completion, or an error body."""

    choices: list[_Choice] = []
    usage: msgspec.Raw = msgspec.Raw()  # any JSON (Raw | None would only take null)
    error: _Error | None = None


_decode_body = msgspec.json.Decoder(_Body).decode


def _error_code(error: _Error | None) -> str:
    if error is None:
        return "-"
    return str(error.code if error.code is not None else error.type)


class ResponseReader:
    """One response at a time; `reset` before each request."""

    def __init__(
        self,
        delay: Histogram,
        gap: Histogram,
        tools: bool,
        expect_chunks: int,
        expect_usage: bool,
    ) -> None:
        self.delay = delay
        self.gap = gap
        self.tools = tools
        self.expect_chunks = expect_chunks
        self.expect_usage = expect_usage
        self.reset()

    def reset(self) -> None:
        self.buffer = b""
        self.sse = b""
        self.status = 0
        self.head_done = False
        self.chunked = False
        self.length = -1  # Content-Length; -1: none (chunked, or until the connection closes)
        self.keep_alive = True
        self.chunk_left = -1  # bytes of the current HTTP chunk still to read; -1: a size line
        self.body = b""  # a non-stream body, or a non-200 stream's body
        self.chunks = 0
        self.last_chunk_ns = 0
        self.done = False
        self.usage = False
        self.finish: str | None = None
        self.calls: dict[int, dict[str, str]] = {}
        self.kind: str | None = None
        self.complete = False

    # -- bytes in
    def feed(self, data: bytes, now_ns: int) -> bool:
        """Takes the next bytes; True once the response is complete (then see `kind`)."""
        buffer = self.buffer + data if self.buffer else data
        self.buffer = b""
        if not self.head_done:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buffer
                return False
            if not self._head(buffer[:end]):
                return self._finish("bad_http")
            buffer = buffer[end + 4 :]
            if self.status == 100:  # an interim answer: the real head follows
                self.head_done = False
                return self.feed(buffer, now_ns) if buffer else False
        if not self.chunked:
            self.body += buffer
            if self.length >= 0 and len(self.body) >= self.length:
                self.body = self.body[: self.length]
                return self._whole_body(now_ns)
            return False
        return self._chunked(buffer, now_ns)

    def eof(self, now_ns: int) -> bool:
        """The connection closed: completes a close-delimited body, else `truncated`."""
        if self.head_done and not self.chunked and self.length < 0:
            return self._whole_body(now_ns)
        return self._finish("truncated")

    def _head(self, head: bytes) -> bool:
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        if len(parts) < 2 or not parts[0].startswith(b"HTTP/1.") or not parts[1].isdigit():
            return False
        self.status = int(parts[1])
        self.keep_alive = parts[0] == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"transfer-encoding":
                self.chunked = b"chunked" in value.lower()
            elif name == b"content-length":
                self.length = int(value)
            elif name == b"connection":
                self.keep_alive = value.strip().lower() != b"close"
        self.head_done = True
        return True

    def _chunked(self, buffer: bytes, now_ns: int) -> bool:
        pos, size = 0, len(buffer)
        while pos < size:
            if self.chunk_left < 0:
                line_end = buffer.find(b"\r\n", pos)
                if line_end < 0:
                    break
                try:
                    length = int(buffer[pos:line_end].split(b";", 1)[0], 16)
                except ValueError:
                    return self._finish("bad_http")
                if length == 0:
                    # the last chunk; no trailer from any server we drive: "0\r\n\r\n"
                    if size - line_end < 4:
                        break
                    return self._stream_end()
                pos = line_end + 2
                self.chunk_left = length
            take = min(self.chunk_left, size - pos)
            if take:
                self._body_bytes(buffer[pos : pos + take], now_ns)
                pos += take
                self.chunk_left -= take
            if self.chunk_left == 0:
                if size - pos < 2:
                    break
                pos += 2  # the CRLF after the chunk's data
                self.chunk_left = -1
            if self.complete:
                return True
        self.buffer = buffer[pos:]
        return False

    def _body_bytes(self, data: bytes, now_ns: int) -> None:
        if self.status != 200:
            self.body += data
            return
        sse = self.sse + data if self.sse else data
        if b"\r" in data or sse.endswith(b"\r"):  # CRLF line ends (none of ours, but allowed)
            sse = sse.replace(b"\r\n", b"\n")
        start = 0
        while True:
            end = sse.find(b"\n\n", start)
            if end < 0:
                break
            self._event(sse[start:end], now_ns)
            start = end + 2
        self.sse = sse[start:]

    # -- events and answers
    def _event(self, event: bytes, now_ns: int) -> None:
        if event.startswith(b"data: ") and b"\n" not in event:
            payload = event[6:]  # the usual event: one data line
        else:
            payload = b""
            for line in event.split(b"\n"):
                if line.startswith(b"data:"):
                    value = line[6:] if line[5:6] == b" " else line[5:]
                    payload = value if not payload else payload + b"\n" + value
        if not payload:
            return  # a comment (keep-alive) or an event without data
        if payload == b"[DONE]":
            self.done = True
            return
        try:
            body = _decode_body(payload)
        except msgspec.DecodeError:
            self._set_kind("bad_json")
            return
        if body.error is not None:
            self._set_kind("stream_error:" + _error_code(body.error))
        usage = bytes(body.usage)
        if usage and usage != b"null":
            self.usage = True
        for choice in body.choices:
            self._delta(choice.delta or choice.message, now_ns)
            if choice.finish_reason is not None:
                self.finish = choice.finish_reason

    def _delta(self, delta: _Delta | None, now_ns: int) -> None:
        if delta is None:
            return
        if delta.content:
            self._stamps(delta.content, now_ns)
        for call in delta.tool_calls or ():
            index = call.index if call.index is not None else len(self.calls)
            assembled = self.calls.setdefault(index, {"arguments": ""})
            if call.id:
                assembled["id"] = call.id
            function = call.function
            if function is not None:
                if function.name:
                    assembled["name"] = function.name
                if function.arguments:
                    assembled["arguments"] += function.arguments
                    self._stamps(function.arguments, now_ns)

    def _stamps(self, text: str, now_ns: int) -> None:
        if "@" not in text:
            return
        delay, gap = self.delay.record, self.gap.record
        for sent_ns in wire.stamps_in(text):
            delay((now_ns - sent_ns) / 1000.0)
            if self.last_chunk_ns:
                gap((now_ns - self.last_chunk_ns) / 1000.0)
            self.last_chunk_ns = now_ns
            self.chunks += 1

    def _stream_end(self) -> bool:
        if self.status != 200:
            return self._non_200()
        if self.kind is None:
            if not self.done:
                self._set_kind("no_done")
            elif self.finish != ("tool_calls" if self.tools else "stop"):
                self._set_kind("bad_finish")
            elif self.expect_usage and not self.usage:
                self._set_kind("no_usage")
            else:
                self._check_content()
        return self._finish(self.kind)

    def _whole_body(self, now_ns: int) -> bool:
        if self.status != 200:
            return self._non_200()
        try:
            body = _decode_body(self.body)
        except msgspec.DecodeError:
            return self._finish("bad_json")
        for choice in body.choices:
            self._delta(choice.message, now_ns)
            self.finish = choice.finish_reason
        if self.finish != ("tool_calls" if self.tools else "stop"):
            return self._finish("bad_finish")
        self._check_content()
        return self._finish(self.kind)

    def _check_content(self) -> None:
        if self.tools and wire.check_tool_calls(self.calls) is not None:
            self._set_kind("tools_mismatch")
        elif self.expect_chunks and self.chunks != self.expect_chunks:
            self._set_kind("missing_chunks")

    def _non_200(self) -> bool:
        try:
            code = _error_code(_decode_body(self.body).error)
        except msgspec.DecodeError:
            code = "-"
        return self._finish(f"status_{self.status}:{code}")

    def _set_kind(self, kind: str) -> None:
        if self.kind is None:
            self.kind = kind

    def _finish(self, kind: str | None) -> bool:
        if kind:
            self._set_kind(kind)
        self.complete = True
        return True
