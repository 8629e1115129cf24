"""Endless garbage without a delimiter, fed in small reads, must hit each decoder's size
bound: the documented error is raised once the bound is passed, and the bytes held (and the
memory allocated, measured with tracemalloc) never exceed the bound by more than a read."""

from __future__ import annotations

import random
import struct
import tracemalloc
import zlib
from collections.abc import Callable
from collections.abc import Iterator
from typing import Any

import pytest

from gateway.emulation.envelope import MAX_ENVELOPE_CHARS
from gateway.emulation.envelope import EnvelopeScanner
from gateway.errors import FramingError
from gateway.errors import UpstreamProtocolError
from gateway.framing.aws_eventstream import EventStreamDecoder
from gateway.framing.http1 import MAX_CHUNK_LINE
from gateway.framing.http1 import MAX_HEAD_BYTES
from gateway.framing.http1 import ResponseParser
from gateway.framing.ndjson import NDJSONDecoder
from gateway.framing.sse import SSEDecoder

TEN_MIB = 10 * 1024 * 1024
READ = 4096
MIB = 1024 * 1024


def garbage(without: bytes, total: int = TEN_MIB) -> Iterator[bytes]:
    """`total` random bytes in reads of READ, none of them a byte of `without`."""
    allowed = bytes(b for b in range(256) if b not in without)
    rng = random.Random(7)
    block = bytes(rng.choice(allowed) for _ in range(64 * 1024))
    for sent in range(0, total, READ):
        offset = sent % len(block)
        yield (block + block)[offset : offset + READ]


def feed_until_error(
    feed: Callable[[bytes], Any], reads: Iterator[bytes], held: Callable[[], int], bound: int
) -> int:
    """Feed `reads` until the decoder raises; return the bytes fed. Fails if it never
    raises or holds more than `bound` bytes after a read."""
    fed = 0
    for read in reads:
        feed(read)  # the error to expect escapes here
        fed += len(read)
        assert held() <= bound, f"{held()} bytes held after {fed} fed (bound {bound})"
    raise AssertionError(f"{fed} bytes of garbage accepted without an error")


def measured(run: Callable[[], object]) -> int:
    """Peak bytes allocated while `run` runs."""
    tracemalloc.start()
    try:
        run()
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return peak


def test_sse_line_without_end() -> None:
    bound = 8 * MIB  # the default max_event_bytes
    decoder = SSEDecoder()

    def run() -> None:
        with pytest.raises(FramingError, match="max_event_bytes"):
            feed_until_error(
                decoder.feed,
                garbage(b"\r\n"),
                lambda: decoder._tail_len + decoder._data_len,
                bound,
            )

    peak = measured(run)
    assert peak < bound + 2 * MIB, f"peak {peak} bytes allocated for a bound of {bound}"


def test_sse_data_lines_without_blank_line() -> None:
    """Many short `data:` lines and never the blank line that ends the event."""
    bound = 64 * 1024
    decoder = SSEDecoder(max_event_bytes=bound)
    lines = (b"data: " + b"x" * 90 + b"\n" for _ in range(TEN_MIB // 97))
    with pytest.raises(FramingError):
        feed_until_error(decoder.feed, lines, lambda: decoder._data_len, bound)


def test_ndjson_line_without_end() -> None:
    bound = 8 * MIB
    decoder = NDJSONDecoder()

    def run() -> None:
        with pytest.raises(FramingError, match="max_line_bytes"):
            feed_until_error(decoder.feed, garbage(b"\n"), lambda: decoder._tail_len, bound + 1)

    assert measured(run) < bound + 2 * MIB


def _prelude(total: int, headers: int = 0) -> bytes:
    head = struct.pack(">II", total, headers)
    return head + struct.pack(">I", zlib.crc32(head))


@pytest.mark.parametrize("total", [2**32 - 1, 24 * MIB + 17, 16 + 128 * 1024 + 1])
def test_event_stream_huge_length_is_refused_at_the_prelude(total: int) -> None:
    """An absurd total_length with a good prelude CRC: refused before anything is held."""
    decoder = EventStreamDecoder()
    headers = 128 * 1024 + 1 if total == 16 + 128 * 1024 + 1 else 0
    with pytest.raises(FramingError):
        decoder.feed(_prelude(total, headers))
    assert len(decoder._buf) == 0


def test_event_stream_garbage_fails_at_once() -> None:
    decoder = EventStreamDecoder()
    with pytest.raises(FramingError, match="CRC"):
        feed_until_error(decoder.feed, garbage(b""), lambda: len(decoder._buf), 12)


def test_event_stream_frame_that_never_completes() -> None:
    """A good prelude for the largest frame allowed, then garbage: held up to the frame's
    length, then it is a frame (whose CRC fails)."""
    decoder = EventStreamDecoder()
    total = 16 + 24 * MIB

    def run() -> None:
        decoder.feed(_prelude(total))
        with pytest.raises(FramingError, match="CRC"):
            feed_until_error(
                decoder.feed, garbage(b"", 2 * total), lambda: len(decoder._buf), total
            )

    assert measured(run) < 2 * total + MIB


def test_http_head_without_end() -> None:
    parser = ResponseParser()
    with pytest.raises(UpstreamProtocolError, match="head is too large"):
        feed_until_error(parser.feed, garbage(b"\r"), lambda: len(parser._buffer), MAX_HEAD_BYTES)


def test_http_chunk_size_line_without_end() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(UpstreamProtocolError, match="line too long"):
        feed_until_error(
            parser.feed,
            (b"f" * READ for _ in range(TEN_MIB // READ)),
            lambda: len(parser._buffer),
            MAX_CHUNK_LINE,
        )


def test_http_endless_trailers_are_not_held() -> None:
    """Trailer lines are read and dropped; only the unfinished one is held."""
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n")
    trailers = (b"X-T: " + b"v" * 4000 + b"\r\n" for _ in range(TEN_MIB // 4007))
    for read in trailers:
        parser.feed(read)
        assert len(parser._buffer) <= MAX_HEAD_BYTES
    assert not parser.done


def test_envelope_that_never_closes_is_released_as_text() -> None:
    """A model that opens a tool-call object and never closes it: the scanner holds at most
    MAX_ENVELOPE_CHARS, then gives the text back."""
    scanner = EnvelopeScanner(frozenset({"f"}))
    scanner.feed('{"name": "f", "arguments": {"a": "')
    released = 0
    for _ in range(TEN_MIB // READ):
        released += sum(len(p) for p in scanner.feed("x" * READ) if isinstance(p, str))
        assert scanner._size <= MAX_ENVELOPE_CHARS + READ
    assert released > TEN_MIB - 2 * MAX_ENVELOPE_CHARS
