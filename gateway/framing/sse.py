"""Server-Sent Events: an incremental decoder and the encoder, sans-IO.

This module owns the SSE framing of both directions of the gateway: `SSEDecoder` turns the
bytes of an upstream `text/event-stream` body, cut at any byte boundary, into `SSEEvent`s;
`encode_event`, `encode_comment` and `DONE` are the bytes the gateway writes to its clients.
It knows nothing about what the data of an event means (JSON parsing belongs to the
provider translators).

Decoding follows WHATWG HTML "event stream interpretation", applied to bytes:
- line ends are LF, CRLF and a bare CR (a CR at the end of one feed and an LF at the start
  of the next are one line end); a UTF-8 BOM at the very start of the stream is skipped;
- `data` lines are joined with LF, `event` names the event, `id` is kept unless it contains
  NUL, `retry` and unknown fields are ignored, lines starting with `:` are comments;
- a blank line dispatches the event, unless it had no `data` line.
Two deliberate departures: the `id` of an `SSEEvent` is the `id` field of that event only
(not the sticky "last event ID"), and at the end of the stream the pending event is
dispatched even without its final blank line (real recordings end that way).

Bound: the data of one unfinished event plus the line being read may not exceed
`max_event_bytes`; past that `FramingError` is raised, before the bytes are buffered.

This module does no IO: it must not import asyncio, aiohttp, logging, time or anything else
that touches the outside world. It may import msgspec and `gateway.errors`.
"""

from __future__ import annotations

import msgspec

from gateway.errors import FramingError

__all__ = ["DONE", "SSEDecoder", "SSEEvent", "encode_comment", "encode_event"]

_BOM = b"\xef\xbb\xbf"
_LF = 10  # ord("\n")
_CR = 13  # ord("\r")
_CR_TO_LF = bytes.maketrans(b"\r", b"\n")
_COLON = 58  # ord(":")


class SSEEvent(msgspec.Struct, frozen=True, gc=False):
    """One dispatched event."""

    data: bytes
    """The data lines joined with LF (the WHATWG trailing LF removed)."""
    event: str = ""
    """The `event:` field, "" when absent."""
    id: str | None = None
    """The `id:` field of this event, None when the event had none."""


class SSEDecoder:
    """Incremental SSE decoder: `feed` bytes as they arrive, `close` at the end of the body.

    The output does not depend on how the input is cut: `feed(a) + feed(b) + close()` equals
    `feed(a + b) + close()`. After a `FramingError` the decoder must not be used again.
    """

    __slots__ = (
        "_at_start",
        "_cr",
        "_data",
        "_data_len",
        "_event",
        "_id",
        "_max",
        "_tail",
        "_tail_len",
        "comments",
    )

    def __init__(self, max_event_bytes: int = 8 * 1024 * 1024) -> None:
        if max_event_bytes < 1:
            raise ValueError("max_event_bytes must be positive")
        self._max = max_event_bytes
        self.comments = 0
        """Comment lines seen (`: keep-alive`), for observability."""
        self._reset()

    def _reset(self) -> None:
        self._at_start = True  # no byte of the stream seen yet: a BOM may still come
        self._cr = False  # the last byte fed was a CR, so an LF first in the next feed is skipped
        self._tail: list[bytes] = []  # pieces of the unfinished line (no line end in them)
        self._tail_len = 0
        self._data: list[bytes] = []  # data line values of the pending event
        self._data_len = 0  # bytes of those values, plus one per line (the LF joining them)
        self._event = ""
        self._id: str | None = None

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Take the next bytes of the stream; return the events they complete."""
        if not data:
            return []
        out: list[SSEEvent] = []
        if self._at_start:
            if self._tail:  # a prefix of the BOM is held back
                data = b"".join(self._tail) + data
                self._tail = []
                self._tail_len = 0
            if len(data) < 3 and _BOM.startswith(data):
                self._tail = [data]
                self._tail_len = len(data)
                return out
            self._at_start = False
            if data.startswith(_BOM):
                data = data[3:]
                if not data:
                    return out
        pos = 0
        if self._cr:
            self._cr = False
            if data[0] == _LF:  # second half of a CRLF cut between two feeds
                pos = 1
        raw = data
        has_cr = _CR in data  # an int needle: a plain memchr, far cheaper than b"\r"
        if has_cr:
            # Every CR becomes an LF, so a line end is always found with one memchr; where the
            # line end was a CRLF (seen in `raw`), the LF after it is skipped too.
            self._cr = data[-1] == _CR
            data = data.translate(_CR_TO_LF)
        n = len(data)
        limit = self._max
        if self._tail:
            nl = data.find(b"\n", pos)
            if nl < 0:
                self._tail_len += n - pos
                if self._data_len + self._tail_len > limit:
                    self._too_big()
                self._tail.append(data[pos:] if pos else data)
                return out
            self._tail.append(data[pos:nl])
            line = b"".join(self._tail)
            self._tail = []
            self._tail_len = 0
            if line:
                if self._data_len + len(line) > limit:
                    self._too_big()
                self._field(line)
            else:
                ev = self._dispatch()
                if ev is not None:
                    out.append(ev)
            pos = nl + 1
            if has_cr and raw[nl] == _CR and pos < n and raw[pos] == _LF:
                pos += 1
        parts = self._data
        find = data.find
        while pos < n:
            nl = find(b"\n", pos)
            if nl < 0:
                break
            if nl != pos:
                # The bound is checked on whole lines, so that it does not depend on the cuts.
                if self._data_len + nl - pos > limit:
                    self._too_big()
                if data.startswith(b"data: ", pos):  # the common case, kept inline
                    value = data[pos + 6 : nl]
                    if not parts and not has_cr and nl + 1 < n and data[nl + 1] == _LF:
                        # `data: ...\n\n`, the shape of nearly every event: dispatch at once.
                        out.append(SSEEvent(value, self._event, self._id))
                        self._event = ""
                        self._id = None
                        pos = nl + 2
                        continue
                    self._data_len += len(value) + 1
                    parts.append(value)
                else:
                    self._field(data[pos:nl])
            elif parts:  # blank line: dispatch
                out.append(
                    SSEEvent(
                        parts[0] if len(parts) == 1 else b"\n".join(parts),
                        self._event,
                        self._id,
                    )
                )
                parts = self._data = []
                self._data_len = 0
                self._event = ""
                self._id = None
            else:  # blank line ending an event without data: nothing to dispatch
                self._event = ""
                self._id = None
            pos = nl + 1
            if has_cr and raw[nl] == _CR and pos < n and raw[pos] == _LF:
                pos += 1  # the LF of a CRLF
        if pos < n:
            self._tail_len = n - pos
            if self._data_len + self._tail_len > limit:
                self._too_big()
            self._tail = [data[pos:] if pos else data]
        return out

    def close(self) -> list[SSEEvent]:
        """End of stream: take an unfinished last line as complete and flush the pending event.

        The decoder is then as new, ready for another stream (`comments` keeps counting).
        """
        out: list[SSEEvent] = []
        if self._tail:
            self._field(b"".join(self._tail))
        ev = self._dispatch()
        if ev is not None:
            out.append(ev)
        self._reset()
        return out

    def _dispatch(self) -> SSEEvent | None:
        """A blank line: the pending event if it had a data line; the buffers are reset."""
        parts = self._data
        ev = None
        if parts:
            ev = SSEEvent(parts[0] if len(parts) == 1 else b"\n".join(parts), self._event, self._id)
            self._data = []
            self._data_len = 0
        self._event = ""
        self._id = None
        return ev

    def _field(self, line: bytes) -> None:
        """Process one non-blank line (without its line end)."""
        if line[0] == _COLON:
            self.comments += 1
            return
        colon = line.find(b":")
        if colon < 0:
            name = line
            value = b""
        else:
            name = line[:colon]
            start = colon + 2 if line.startswith(b" ", colon + 1) else colon + 1
            value = line[start:]
        if name == b"data":
            self._data_len += len(value) + 1
            self._data.append(value)
        elif name == b"event":
            self._event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\x00" not in value:
            self._id = value.decode("utf-8", "replace")
        # `retry` and unknown fields are ignored.

    def _too_big(self) -> None:
        raise FramingError(
            f"SSE event larger than max_event_bytes={self._max} "
            "(data of one event plus its unfinished line)"
        )


def encode_event(data: bytes, event: str | None = None, id: str | None = None) -> bytes:
    """One SSE event. Line ends in `data` (LF, CRLF, CR) become several `data:` lines.

    `event` and `id` may not contain a line end, and `id` no NUL (a decoder would drop it):
    those raise ValueError.
    """
    if event is None and id is None and _LF not in data and _CR not in data:
        return b"data: " + data + b"\n\n"
    head = b""
    if event is not None:
        if "\n" in event or "\r" in event:
            raise ValueError("SSE event name must not contain a line end")
        head = b"event: " + event.encode() + b"\n"
    if id is not None:
        if "\n" in id or "\r" in id or "\x00" in id:
            raise ValueError("SSE id must not contain a line end or NUL")
        head += b"id: " + id.encode() + b"\n"
    if _CR in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if _LF in data:
        data = data.replace(b"\n", b"\ndata: ")
    return head + b"data: " + data + b"\n\n"


def encode_comment(text: str = "keep-alive") -> bytes:
    """An SSE comment line, ignored by clients: `b": keep-alive\\n\\n"` by default."""
    if "\n" in text or "\r" in text:
        raise ValueError("SSE comment must not contain a line end")
    return b": " + text.encode() + b"\n\n"


DONE: bytes = b"data: [DONE]\n\n"
"""The OpenAI Chat Completions end-of-stream sentinel."""
