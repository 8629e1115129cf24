"""AWS event-stream (`application/vnd.amazon.eventstream`): an incremental decoder and an encoder.

This module owns the binary framing of Bedrock's ConverseStream body: `EventStreamDecoder`
turns the bytes of the body, cut at any byte boundary, into `EventStreamMessage`s (headers and
raw payload); `encode_message` builds valid frames for tests and fake upstreams. It knows
nothing about what a payload means (JSON parsing and the `:event-type` vocabulary belong to
the Bedrock translator).

One frame, all integers big-endian:

    [total_length u32][headers_length u32][prelude_crc u32 = CRC32 of bytes 0..7]
    [headers: headers_length bytes][payload][message_crc u32 = CRC32 of all bytes before it]

and each header is `[name_len u8][name utf-8][type u8][value]`, the value being, by type:
0 true, 1 false (no bytes), 2 i8, 3 i16, 4 i32, 5 i64, 6 bytes (u16 length), 7 string
(u16 length, utf-8), 8 timestamp (i64 milliseconds, kept as an int), 9 uuid (16 raw bytes).
A header name seen twice in one frame keeps its last value.

Bounds: the prelude (the first 12 bytes of a frame) is checked as soon as it has arrived:
its CRC, `total_length >= 16`, headers at most `max_headers_bytes`, payload at most
`max_payload_bytes`, and `headers_length` fitting in `total_length`; so an absurd length is a
`FramingError` before the frame's bytes are buffered. Every error is a `FramingError`; after
one the decoder refuses further input. A stream ending inside a frame is an error at `close`.

This module does no IO: it must not import asyncio, aiohttp, logging, time or anything else
that touches the outside world. It may import msgspec and `gateway.errors`.
"""

from __future__ import annotations

import struct
import zlib
from typing import NoReturn

import msgspec

from gateway.errors import FramingError

__all__ = ["EventStreamDecoder", "EventStreamMessage", "HeaderValue", "encode_message"]

HeaderValue = bool | int | bytes | str
"""A decoded header value: bool (types 0/1), int (2-5 and 8), bytes (6 and 9), str (7)."""

_PRELUDE = 12  # total_length, headers_length, prelude_crc
_OVERHEAD = 16  # prelude plus message_crc: the smallest frame (no headers, no payload)
_U32 = struct.Struct(">I")
_PRELUDE_STRUCT = struct.Struct(">III")
_U16 = struct.Struct(">H")
_I8 = struct.Struct(">b")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")
_INT_STRUCTS = {2: _I8, 3: _I16, 4: _I32, 5: _I64, 8: _I64}
_I32_MIN = -(2**31)
_I32_MAX = 2**31 - 1


class EventStreamMessage(msgspec.Struct, frozen=True, gc=False):
    """One decoded frame."""

    headers: dict[str, HeaderValue]
    payload: bytes

    def _str_header(self, name: str) -> str | None:
        value = self.headers.get(name)
        return value if isinstance(value, str) else None

    @property
    def message_type(self) -> str:
        """`:message-type`: "event" (also when absent), "exception" or "error"."""
        return self._str_header(":message-type") or "event"

    @property
    def event_type(self) -> str | None:
        """`:event-type` (messageStart, contentBlockDelta, ...), None when absent."""
        return self._str_header(":event-type")

    @property
    def exception_type(self) -> str | None:
        """`:exception-type` of an exception frame (throttlingException, ...)."""
        return self._str_header(":exception-type")

    @property
    def error_code(self) -> str | None:
        """`:error-code` of an error frame."""
        return self._str_header(":error-code")

    @property
    def error_message(self) -> str | None:
        """`:error-message` of an error frame."""
        return self._str_header(":error-message")


class EventStreamDecoder:
    """Incremental event-stream decoder: `feed` bytes as they arrive, `close` at the end.

    The output does not depend on how the input is cut: `feed(a) + feed(b) + close()` equals
    `feed(a + b) + close()`. After a `FramingError` every call raises `FramingError`.
    """

    __slots__ = ("_buf", "_failed", "_max_headers", "_max_payload", "_need")

    def __init__(
        self,
        max_payload_bytes: int = 24 * 1024 * 1024,
        max_headers_bytes: int = 128 * 1024,
    ) -> None:
        if max_payload_bytes < 0 or max_headers_bytes < 0:
            raise ValueError("event-stream bounds must not be negative")
        self._max_payload = max_payload_bytes
        self._max_headers = max_headers_bytes
        self._buf = bytearray()  # the bytes of the unfinished frame (and only those)
        self._need = 0  # total_length of the buffered frame once its prelude is checked
        self._failed = False

    def feed(self, data: bytes) -> list[EventStreamMessage]:
        """Take the next bytes of the stream; return the messages they complete."""
        if self._failed:
            raise FramingError("event-stream decoder used after a framing error")
        if not data:
            return []
        buf = self._buf
        if not buf:
            # Nothing pending: parse the caller's bytes in place, copy only the remainder.
            out, pos = self._parse(data)
            if pos < len(data):
                buf += memoryview(data)[pos:]
            return out
        buf += data
        if len(buf) < self._need:  # still inside a frame whose prelude is known good
            return []
        out, pos = self._parse(buf)
        del buf[:pos]
        return out

    def close(self) -> list[EventStreamMessage]:
        """End of stream. A partial frame still buffered is a `FramingError` (truncated body).

        On success the decoder is as new, ready for another stream.
        """
        if self._failed:
            raise FramingError("event-stream decoder used after a framing error")
        if self._buf:
            pending = len(self._buf)
            need = f" of {self._need}" if self._need else ""
            self._fail(f"event stream truncated: {pending}{need} bytes of a frame at the end")
        self._need = 0
        return []

    def _parse(self, data: bytes | bytearray) -> tuple[list[EventStreamMessage], int]:
        """Decode every whole frame of `data`; return them and the offset of the first unused byte.

        Sets `_need` to the total_length of an incomplete frame whose prelude is already
        checked (0 when fewer than 12 bytes of it are there).
        """
        out: list[EventStreamMessage] = []
        n = len(data)
        pos = 0
        crc32 = zlib.crc32
        with memoryview(data) as mv:
            while n - pos >= _PRELUDE:
                total, headers_len, prelude_crc = _PRELUDE_STRUCT.unpack_from(mv, pos)
                if crc32(mv[pos : pos + 8]) != prelude_crc:
                    self._fail(
                        f"event-stream prelude CRC mismatch at offset {pos}: "
                        f"computed {crc32(mv[pos : pos + 8]):#010x}, frame says {prelude_crc:#010x}"
                    )
                self._check_lengths(total, headers_len)
                end = pos + total
                if end > n:
                    self._need = total
                    return out, pos
                (message_crc,) = _U32.unpack_from(mv, end - 4)
                # CRC32 of bytes 0..total-5 equals CRC32 of bytes 8..total-5 seeded with the
                # CRC32 of bytes 0..7, which is the prelude CRC just checked.
                computed = crc32(mv[pos + 8 : end - 4], prelude_crc)
                if computed != message_crc:
                    self._fail(
                        f"event-stream message CRC mismatch at offset {pos}: "
                        f"computed {computed:#010x}, frame says {message_crc:#010x}"
                    )
                h_start = pos + _PRELUDE
                h_end = h_start + headers_len
                headers = self._headers(mv, h_start, h_end) if headers_len else {}
                out.append(EventStreamMessage(headers, bytes(mv[h_end : end - 4])))
                pos = end
        self._need = 0
        return out, pos

    def _check_lengths(self, total: int, headers_len: int) -> None:
        if total < _OVERHEAD:
            self._fail(f"event-stream total_length {total} is below the minimum {_OVERHEAD}")
        if headers_len > self._max_headers:
            self._fail(
                f"event-stream headers_length {headers_len} exceeds "
                f"max_headers_bytes={self._max_headers}"
            )
        payload_len = total - _OVERHEAD - headers_len
        if payload_len < 0:
            self._fail(
                f"event-stream headers_length {headers_len} does not fit in total_length {total}"
            )
        if payload_len > self._max_payload:
            self._fail(
                f"event-stream payload of {payload_len} bytes exceeds "
                f"max_payload_bytes={self._max_payload}"
            )

    def _headers(self, mv: memoryview, pos: int, end: int) -> dict[str, HeaderValue]:
        """The headers block `mv[pos:end]`, already covered by a good message CRC."""
        headers: dict[str, HeaderValue] = {}
        try:
            while pos < end:
                name_len = mv[pos]
                name_end = pos + 1 + name_len
                if name_end + 1 > end:  # the name and the type byte
                    self._fail("event-stream header name runs past the headers block")
                name = str(mv[pos + 1 : name_end], "utf-8")
                kind = mv[name_end]
                pos = name_end + 1
                value: HeaderValue
                if kind == 7 or kind == 6:
                    if pos + 2 > end:
                        self._fail(f"event-stream header {name!r} runs past the headers block")
                    (length,) = _U16.unpack_from(mv, pos)
                    pos += 2
                    if pos + length > end:
                        self._fail(f"event-stream header {name!r} runs past the headers block")
                    value = (
                        str(mv[pos : pos + length], "utf-8")
                        if kind == 7
                        else bytes(mv[pos : pos + length])
                    )
                    pos += length
                elif kind == 0 or kind == 1:
                    value = kind == 0
                elif kind == 9:
                    if pos + 16 > end:
                        self._fail(f"event-stream header {name!r} runs past the headers block")
                    value = bytes(mv[pos : pos + 16])
                    pos += 16
                else:
                    fmt = _INT_STRUCTS.get(kind)
                    if fmt is None:
                        self._fail(f"event-stream header {name!r} has unknown type {kind}")
                    if pos + fmt.size > end:
                        self._fail(f"event-stream header {name!r} runs past the headers block")
                    (value,) = fmt.unpack_from(mv, pos)
                    pos += fmt.size
                headers[name] = value
        except UnicodeDecodeError as exc:
            self._fail(f"event-stream header is not valid UTF-8: {exc}")
        return headers

    def _fail(self, message: str) -> NoReturn:
        self._failed = True
        self._buf = bytearray()
        self._need = 0
        raise FramingError(message)


def encode_message(headers: dict[str, str | bytes | bool | int], payload: bytes) -> bytes:
    """One event-stream frame with valid CRCs.

    Header values: str as type 7, bytes as 6, bool as 0/1, int as i32 (type 4). A name longer
    than 255 UTF-8 bytes, a str/bytes value longer than 65535 bytes or an int outside i32
    raises ValueError.
    """
    parts: list[bytes] = []
    for name, value in headers.items():
        raw_name = name.encode()
        if len(raw_name) > 255:
            raise ValueError(f"event-stream header name longer than 255 bytes: {name!r}")
        parts.append(bytes((len(raw_name),)) + raw_name)
        if isinstance(value, bool):
            parts.append(b"\x00" if value else b"\x01")
        elif isinstance(value, int):
            if not _I32_MIN <= value <= _I32_MAX:
                raise ValueError(f"event-stream header {name!r}: {value} is outside i32")
            parts.append(b"\x04" + _I32.pack(value))
        else:
            raw = value.encode() if isinstance(value, str) else bytes(value)
            if len(raw) > 0xFFFF:
                raise ValueError(f"event-stream header {name!r} value longer than 65535 bytes")
            parts.append((b"\x07" if isinstance(value, str) else b"\x06") + _U16.pack(len(raw)))
            parts.append(raw)
    block = b"".join(parts)
    total = _OVERHEAD + len(block) + len(payload)
    if total > 0xFFFFFFFF:
        raise ValueError("event-stream frame longer than 4 GiB")
    prelude = _U32.pack(total) + _U32.pack(len(block))
    head = prelude + _U32.pack(zlib.crc32(prelude))
    body = head + block + payload
    return body + _U32.pack(zlib.crc32(body))
