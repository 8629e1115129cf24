"""An incremental, sans-IO HTTP/1.1 response parser and request encoder for upstream calls.

upstream/http_connection.py feeds it the bytes of one connection;
it returns the response head, body bytes as they arrive, and the end of the response.
Framing by Content-Length, chunked transfer coding (extensions and trailers skipped) or the
connection's close; 1xx interim responses are skipped. Heads and chunk-size lines are
bounded. No IO, no asyncio: it is fed bytes and returns events.
"""

from __future__ import annotations

from typing import Final

import msgspec

from gateway.errors import UpstreamProtocolError

MAX_HEAD_BYTES: Final = 64 * 1024
MAX_CHUNK_LINE: Final = 4096


class ResponseHead(msgspec.Struct, gc=False):
    status: int
    reason: str
    headers: dict[str, str]  # names lower-cased; repeated names joined with ", "
    keep_alive: bool


class _End:
    """The response is complete."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "END"


END: Final = _End()
Event = ResponseHead | bytes | _End

_HEX_DIGITS: Final = b"0123456789abcdefABCDEF"
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_CRLF, _TRAILERS, _UNTIL_CLOSE, _DONE = range(8)


class ResponseParser:
    """One response at a time; `reset()` readies it for the next on a kept-alive connection."""

    __slots__ = ("_buffer", "_keep_alive", "_remaining", "_seen", "_state", "head")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._buffer = b""
        self._state = _HEAD
        self._remaining = 0
        self._keep_alive = True
        self._seen = False
        self.head: ResponseHead | None = None

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def started(self) -> bool:
        """Some byte of the response was received (an interim 100 Continue counts)."""
        return self._seen

    def feed(self, data: bytes) -> list[Event]:
        events: list[Event] = []
        if data:
            self._seen = True
        if self._state == _DONE:
            if data:
                raise UpstreamProtocolError("the upstream sent bytes after its response ended")
            return events
        buffer = self._buffer + data if self._buffer else data
        self._buffer = b""
        # Positions into `buffer`, never re-slicing what is left: one read may hold dozens
        # of chunks, and slicing the rest after each would copy it again and again.
        pos, size = 0, len(buffer)
        while pos < size:
            state = self._state
            if state == _CHUNK_SIZE:
                pos = self._chunks(buffer, pos, events)
            elif state in (_LENGTH, _CHUNK_DATA):
                take = min(self._remaining, size - pos)
                events.append(buffer if take == size else buffer[pos : pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    if state == _LENGTH:
                        self._finish(events)
                    elif buffer[pos : pos + 2] == b"\r\n":  # saves a turn per chunk when split
                        pos += 2
                        self._state = _CHUNK_SIZE
                    else:
                        self._state = _CHUNK_CRLF
            elif state == _UNTIL_CLOSE:
                events.append(buffer[pos:] if pos else buffer)
                pos = size
            elif state == _DONE:
                raise UpstreamProtocolError("the upstream sent bytes after its response ended")
            else:
                after = self._parse_line_state(buffer, pos, events)
                if after < 0:
                    self._buffer = buffer[pos:]
                    break
                pos = after
        return events

    def close(self) -> list[Event]:
        """The connection closed: the end of a close-delimited body, else a truncation."""
        if self._state == _UNTIL_CLOSE:
            self._state = _DONE
            return [END]
        if self._state == _DONE:
            return []
        raise UpstreamProtocolError(
            "the upstream closed the connection before its response was complete"
        )

    # --- heads, chunk sizes, trailers -----------------------------------------------------

    def _parse_line_state(self, buffer: bytes, pos: int, events: list[Event]) -> int:
        """Consume one head / CRLF after a chunk's data / trailer line from `pos`; returns
        the position after it, or -1 when more bytes are needed. Chunk-size lines: `_chunks`."""
        state = self._state
        if state == _HEAD:
            end = buffer.find(b"\r\n\r\n", pos)
            if (end < 0 and len(buffer) - pos > MAX_HEAD_BYTES) or end + 4 - pos > MAX_HEAD_BYTES:
                raise UpstreamProtocolError("the upstream's response head is too large")
            if end < 0:
                return -1
            head = self._parse_head(buffer[pos:end])
            if head is not None:
                events.append(head)
                if self._state == _DONE:
                    events.append(END)
            return end + 4
        if state == _CHUNK_CRLF:
            if len(buffer) - pos < 2:
                return -1
            if not buffer.startswith(b"\r\n", pos):
                raise UpstreamProtocolError("malformed chunked body: no CRLF after a chunk")
            self._state = _CHUNK_SIZE
            return pos + 2
        # _TRAILERS: lines until an empty one, each read and dropped
        end = buffer.find(b"\r\n", pos)
        # a line's limit excludes its CRLF, also when a read ends between the CR and the LF
        unfinished = len(buffer) - pos - buffer.endswith(b"\r")
        if (end < 0 and unfinished > MAX_HEAD_BYTES) or end - pos > MAX_HEAD_BYTES:
            raise UpstreamProtocolError("malformed chunked body: line too long")
        if end < 0:
            return -1
        if end == pos:
            self._finish(events)
        return end + 2

    def _chunks(self, buffer: bytes, pos: int, events: list[Event]) -> int:
        """Consume chunks from `pos`, the start of a chunk-size line: every whole chunk in one
        pass, then the start of one that continues in later reads (its data is left to
        `feed`), or the last chunk's line. Returns the position after what it consumed; an
        incomplete size line is held for the next read."""
        # One loop turn per chunk, not one per state: a streamed answer is dozens of small
        # chunks, often in a single read, and the per-state dispatch cost more than the work.
        find = buffer.find
        append = events.append
        size = len(buffer)
        while pos < size:
            end = find(b"\r\n", pos)
            if end < 0:  # the limit excludes the CRLF, also when a read ends after the CR
                if size - pos - buffer.endswith(b"\r") > MAX_CHUNK_LINE:
                    raise UpstreamProtocolError("malformed chunked body: line too long")
            elif end - pos > MAX_CHUNK_LINE:
                raise UpstreamProtocolError("malformed chunked body: line too long")
            if end < 0:
                self._buffer = buffer[pos:]
                return size
            line = buffer[pos:end]
            # Bare hex digits (all an upstream usually sends) take int() directly; the check
            # also keeps Python's own int syntax ("+5", "0x5", "0_5") out.
            length = _chunk_size(line) if not line or line.strip(_HEX_DIGITS) else int(line, 16)
            pos = end + 2
            if not length:
                self._state = _TRAILERS
                return pos
            stop = pos + length
            if stop + 2 > size:
                self._remaining = length
                self._state = _CHUNK_DATA
                return pos
            if buffer[stop : stop + 2] != b"\r\n":
                raise UpstreamProtocolError("malformed chunked body: no CRLF after a chunk")
            append(buffer[pos:stop])
            pos = stop + 2
        return pos

    def _parse_head(self, raw: bytes) -> ResponseHead | None:
        lines = raw.decode("latin-1").split("\r\n")
        status_line = lines[0]
        version, _, rest = status_line.partition(" ")
        code, _, reason = rest.partition(" ")
        # isascii: the head is latin-1, where "²³¹".isdigit() is true and int() refuses it
        if not version.startswith("HTTP/1.") or not (
            len(code) == 3 and code.isascii() and code.isdigit()
        ):
            raise UpstreamProtocolError(
                f"malformed status line from upstream: {status_line[:80]!r}"
            )
        status = int(code)
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                raise UpstreamProtocolError("malformed header line from upstream")
            key = name.lower()
            value = value.strip()
            headers[key] = f"{headers[key]}, {value}" if key in headers else value
        if 100 <= status < 200:
            return None  # interim (100 Continue, 103 Early Hints): the real head follows
        connection = headers.get("connection", "").lower()
        if version == "HTTP/1.0":
            keep_alive = "keep-alive" in connection
        else:
            keep_alive = "close" not in connection
        transfer = headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        if status in (204, 304):
            self._state = _DONE
        elif transfer:
            if transfer.rsplit(",", 1)[-1].strip() != "chunked":
                raise UpstreamProtocolError(f"unsupported transfer-encoding {transfer!r}")
            self._state = _CHUNK_SIZE
        elif length is not None:
            if not (length.isascii() and length.isdigit()):
                raise UpstreamProtocolError("malformed content-length from upstream")
            self._remaining = int(length)
            self._state = _LENGTH if self._remaining else _DONE
        else:
            self._state = _UNTIL_CLOSE
            keep_alive = False
        self._keep_alive = keep_alive
        self.head = ResponseHead(status, reason, headers, keep_alive)
        return self.head

    def _finish(self, events: list[Event]) -> None:
        self._state = _DONE
        events.append(END)


def _chunk_size(line: bytes) -> int:
    """The size on a chunk-size line that is not bare hex: extensions dropped, blanks around
    the number allowed."""
    size_text = line.split(b";", 1)[0].strip()
    if not size_text or size_text.strip(_HEX_DIGITS):
        raise UpstreamProtocolError("malformed chunked body: bad chunk size")
    return int(size_text, 16)


_FRAMING_HEADERS: Final = frozenset({"host", "content-length", "transfer-encoding"})


def encode_request(
    method: str, target: str, host: str, headers: dict[str, str], body: bytes
) -> bytes:
    """One HTTP/1.1 request with a Content-Length body. Header values must be single lines;
    Host, Content-Length and Transfer-Encoding in `headers` are ignored (set from the call)."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}", f"Content-Length: {len(body)}"]
    for name, value in headers.items():
        if name.lower() in _FRAMING_HEADERS:
            continue  # set above from the request itself
        if "\n" in value or "\r" in value or "\n" in name or "\r" in name:
            raise ValueError(f"header {name!r} contains a line break")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    return "\r\n".join(lines).encode("latin-1") + body
