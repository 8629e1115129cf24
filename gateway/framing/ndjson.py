"""Newline-delimited JSON (NDJSON, `application/x-ndjson`): an incremental decoder, sans-IO.

`NDJSONDecoder` turns the bytes of an upstream NDJSON body, cut at any byte boundary, into
its lines, one JSON document each (as bytes, not parsed: JSON parsing belongs to the
provider translators). Line ends are LF and CRLF (the CR before an LF is dropped, also when
the two arrive in different feeds); blank lines (empty or whitespace only) are skipped; at
the end of the stream a last line without its line end is still a line.

Bound: one line (without its line end) may not exceed `max_line_bytes`; past that
`FramingError` is raised, before the bytes are buffered.

This module does no IO: it must not import asyncio, aiohttp, logging, time or anything else
that touches the outside world. It may import `gateway.errors`.
"""

from __future__ import annotations

from gateway.errors import FramingError

__all__ = ["NDJSONDecoder"]

_LF = 10  # ord("\n")


class NDJSONDecoder:
    """Incremental NDJSON decoder: `feed` bytes as they arrive, `close` at the end of the body.

    The output does not depend on how the input is cut: `feed(a) + feed(b) + close()` equals
    `feed(a + b) + close()`. After a `FramingError` the decoder must not be used again.
    """

    __slots__ = ("_max", "_tail", "_tail_len")

    def __init__(self, max_line_bytes: int = 8 * 1024 * 1024) -> None:
        if max_line_bytes < 1:
            raise ValueError("max_line_bytes must be positive")
        self._max = max_line_bytes
        self._tail: list[bytes] = []  # pieces of the unfinished line
        self._tail_len = 0

    def feed(self, data: bytes) -> list[bytes]:
        """Take the next bytes of the stream; return the lines they complete."""
        out: list[bytes] = []
        if not data:
            return out
        pos = 0
        n = len(data)
        find = data.find
        if self._tail:
            nl = find(b"\n")
            if nl < 0:
                self._hold(data)
                return out
            self._tail.append(data[:nl])
            line = b"".join(self._tail)
            self._tail = []
            self._tail_len = 0
            self._emit(line, out)
            pos = nl + 1
        while pos < n:
            nl = find(b"\n", pos)
            if nl < 0:
                break
            self._emit(data[pos:nl], out)
            pos = nl + 1
        if pos < n:
            self._hold(data[pos:] if pos else data)
        return out

    def close(self) -> list[bytes]:
        """End of stream: an unfinished last line counts as a line. The decoder is then as
        new, ready for another stream."""
        out: list[bytes] = []
        if self._tail:
            line = b"".join(self._tail)
            self._tail = []
            self._tail_len = 0
            self._emit(line, out)
        return out

    def _hold(self, piece: bytes) -> None:
        self._tail_len += len(piece)
        # the held bytes may still end with the CR of a CRLF: allow one byte for it
        if self._tail_len > self._max + (1 if piece.endswith(b"\r") else 0):
            self._too_big()
        self._tail.append(piece)

    def _emit(self, line: bytes, out: list[bytes]) -> None:
        if line.endswith(b"\r"):
            line = line[:-1]
        if len(line) > self._max:
            self._too_big()
        if line and not line.isspace():
            out.append(line)

    def _too_big(self) -> None:
        raise FramingError(f"NDJSON line larger than max_line_bytes={self._max}")
