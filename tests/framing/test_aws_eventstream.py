"""AWS event-stream decoder and encoder: the recorded Bedrock stream, split-anywhere, round
trips, every framing error, exception frames."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.errors import FramingError
from gateway.framing.aws_eventstream import EventStreamDecoder
from gateway.framing.aws_eventstream import EventStreamMessage
from gateway.framing.aws_eventstream import encode_message
from gateway.framing.registry import make_decoder
from tests.fixtures import FIXTURES

STREAM = (FIXTURES / "bedrock_converse_tools.eventstream").read_bytes()
LINES: list[dict[str, Any]] = [
    json.loads(line)
    for line in (FIXTURES / "bedrock_converse_tools.jsonl").read_text().splitlines()
    if line.strip()
]


def decode_all(data: bytes, cuts: list[int] | None = None) -> list[EventStreamMessage]:
    decoder = EventStreamDecoder()
    out: list[EventStreamMessage] = []
    prev = 0
    for cut in sorted(cuts or []):
        out += decoder.feed(data[prev:cut])
        prev = cut
    out += decoder.feed(data[prev:])
    out += decoder.close()
    return out


def frame(total: int, headers_len: int, rest: bytes = b"") -> bytes:
    """A prelude with a valid prelude CRC, followed by `rest`."""
    prelude = struct.pack(">II", total, headers_len)
    return prelude + struct.pack(">I", zlib.crc32(prelude)) + rest


def raw_frame(headers_block: bytes, payload: bytes = b"") -> bytes:
    """A frame with valid CRCs around a hand-made headers block."""
    total = 16 + len(headers_block) + len(payload)
    body = frame(total, len(headers_block), headers_block + payload)
    return body + struct.pack(">I", zlib.crc32(body))


# --- the recorded stream ---------------------------------------------------------------------


def test_recorded_stream_decodes_to_the_26_frames_of_the_jsonl() -> None:
    messages = decode_all(STREAM)
    assert len(LINES) == 26
    assert len(messages) == 26
    offset = 0
    for message, line in zip(messages, LINES, strict=True):
        meta = line["_frame"]
        assert meta["offset"] == offset
        header_bytes = sum(
            1 + len(k.encode()) + 1 + 2 + len(v.encode()) for k, v in line["_headers"].items()
        )
        assert header_bytes == meta["headers_length"]
        assert meta["total_length"] == 16 + meta["headers_length"] + len(message.payload)
        total, headers_len, prelude_crc = struct.unpack_from(">III", STREAM, offset)
        assert (total, headers_len) == (meta["total_length"], meta["headers_length"])
        assert prelude_crc == int(meta["prelude_crc"], 16)
        (message_crc,) = struct.unpack_from(">I", STREAM, offset + total - 4)
        assert message_crc == int(meta["message_crc"], 16)
        offset += total

        assert message.headers == line["_headers"]
        (key,) = (k for k in line if not k.startswith("_"))
        assert message.event_type == key
        assert message.message_type == "event"
        assert message.exception_type is None
        assert json.loads(message.payload) == line[key]
    assert offset == len(STREAM)
    assert messages[0].event_type == "messageStart"
    assert messages[-1].event_type == "metadata"


def test_registry_names_the_framing() -> None:
    decoder = make_decoder("aws-eventstream")
    assert isinstance(decoder, EventStreamDecoder)
    assert len(decoder.feed(STREAM)) == 26


def test_one_byte_feeds() -> None:
    decoder = EventStreamDecoder()
    out: list[EventStreamMessage] = []
    for i in range(len(STREAM)):
        out += decoder.feed(STREAM[i : i + 1])
    out += decoder.close()
    assert out == decode_all(STREAM)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=40))
def test_split_anywhere_same_frames(cuts: list[int]) -> None:
    assert decode_all(STREAM, cuts) == decode_all(STREAM)


def test_feed_accepts_bytearray_and_memoryview_and_empty() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(b"") == []
    out = decoder.feed(bytearray(STREAM[:100]))
    out += decoder.feed(memoryview(STREAM)[100:])
    assert out == decode_all(STREAM)


def test_close_resets_for_another_stream() -> None:
    decoder = EventStreamDecoder()
    assert len(decoder.feed(STREAM)) == 26
    assert decoder.close() == []
    assert len(decoder.feed(STREAM)) == 26


# --- encoder round trip ----------------------------------------------------------------------

header_names = st.text(min_size=1, max_size=40).filter(lambda s: len(s.encode()) <= 255)
header_values = st.one_of(
    st.booleans(),
    st.integers(min_value=-(2**31), max_value=2**31 - 1),
    st.text(max_size=60),
    st.binary(max_size=60),
)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.dictionaries(header_names, header_values, max_size=6), st.binary(max_size=300)
        ),
        min_size=1,
        max_size=5,
    ),
    st.data(),
)
def test_encode_decode_round_trip(
    messages: list[tuple[dict[str, str | bytes | bool | int], bytes]], data: st.DataObject
) -> None:
    wire = b"".join(encode_message(h, p) for h, p in messages)
    cuts = data.draw(st.lists(st.integers(min_value=0, max_value=len(wire)), max_size=10))
    decoded = decode_all(wire, cuts)
    assert len(decoded) == len(messages)
    for got, (headers, payload) in zip(decoded, messages, strict=True):
        assert got.payload == payload
        assert got.headers == headers
        assert [type(v) for v in got.headers.values()] == [type(v) for v in headers.values()]


def test_encode_known_header_types() -> None:
    wire = encode_message({"s": "é", "b": b"\x00\xff", "t": True, "f": False, "i": -5}, b"{}")
    assert (
        wire[12:]
        == (
            b"\x01s\x07\x00\x02\xc3\xa9"
            b"\x01b\x06\x00\x02\x00\xff"
            b"\x01t\x00"
            b"\x01f\x01"
            b"\x01i\x04\xff\xff\xff\xfb"
            b"{}"
        )
        + wire[-4:]
    )
    assert zlib.crc32(wire[:-4]) == struct.unpack(">I", wire[-4:])[0]


@pytest.mark.parametrize(
    ("headers", "payload"),
    [
        ({"x" * 256: "v"}, b""),
        ({"n": 2**31}, b""),
        ({"n": -(2**31) - 1}, b""),
        ({"s": "v" * 65536}, b""),
        ({"b": b"v" * 65536}, b""),
    ],
)
def test_encode_rejects_what_the_format_cannot_hold(
    headers: dict[str, str | bytes | bool | int], payload: bytes
) -> None:
    with pytest.raises(ValueError, match="event-stream"):
        encode_message(headers, payload)


def test_decodes_every_header_type() -> None:
    uuid = bytes(range(16))
    block = (
        b"\x01a\x00"
        b"\x01b\x01"
        b"\x01c\x02\xff"
        b"\x01d\x03\x80\x00"
        b"\x01e\x04\x00\x00\x01\x00"
        b"\x01f\x05\xff\xff\xff\xff\xff\xff\xff\xfe"
        b"\x01g\x06\x00\x03abc"
        b"\x01h\x07\x00\x02hi"
        b"\x01i\x08\x00\x00\x01\x8b\xcf\xe5\x68\x00"
        b"\x01j\x09" + uuid
    )
    (message,) = decode_all(raw_frame(block, b"payload"))
    assert message.headers == {
        "a": True,
        "b": False,
        "c": -1,
        "d": -32768,
        "e": 256,
        "f": -2,
        "g": b"abc",
        "h": "hi",
        "i": 0x18BCFE56800,
        "j": uuid,
    }
    assert message.payload == b"payload"


def test_empty_frame() -> None:
    (message,) = decode_all(encode_message({}, b""))
    assert message == EventStreamMessage({}, b"")
    assert message.message_type == "event"
    assert message.event_type is None


# --- exception and error frames --------------------------------------------------------------


def test_exception_frame() -> None:
    body = b'{"message":"Too many requests, please wait before trying again."}'
    wire = encode_message(
        {
            ":exception-type": "throttlingException",
            ":content-type": "application/json",
            ":message-type": "exception",
        },
        body,
    )
    (message,) = decode_all(STREAM + wire)[26:]
    assert message.message_type == "exception"
    assert message.exception_type == "throttlingException"
    assert message.event_type is None
    assert json.loads(message.payload) == {
        "message": "Too many requests, please wait before trying again."
    }


def test_error_frame() -> None:
    wire = encode_message(
        {":message-type": "error", ":error-code": "InternalFailure", ":error-message": "boom"},
        b"",
    )
    (message,) = decode_all(wire)
    assert message.message_type == "error"
    assert message.error_code == "InternalFailure"
    assert message.error_message == "boom"


def test_non_string_well_known_header_is_ignored_by_the_properties() -> None:
    (message,) = decode_all(encode_message({":message-type": 3, ":event-type": b"x"}, b""))
    assert message.message_type == "event"
    assert message.event_type is None


# --- errors ----------------------------------------------------------------------------------


def flip(data: bytes, index: int) -> bytes:
    return data[:index] + bytes((data[index] ^ 0x01,)) + data[index + 1 :]


def assert_fails(data: bytes, match: str, decoder: EventStreamDecoder | None = None) -> None:
    decoder = decoder or EventStreamDecoder()
    with pytest.raises(FramingError, match=match):
        decoder.feed(data)
    # A failed decoder refuses everything after.
    with pytest.raises(FramingError, match="after a framing error"):
        decoder.feed(encode_message({}, b""))
    with pytest.raises(FramingError, match="after a framing error"):
        decoder.close()


@pytest.mark.parametrize("index", range(12))
def test_flipped_prelude_byte(index: int) -> None:
    assert_fails(flip(STREAM, index), "prelude CRC mismatch")


def test_flipped_prelude_byte_of_a_later_frame() -> None:
    offset = LINES[5]["_frame"]["offset"]
    decoder = EventStreamDecoder()
    with pytest.raises(FramingError, match=f"prelude CRC mismatch at offset {offset}"):
        decoder.feed(flip(STREAM, offset + 1))


@pytest.mark.parametrize("where", ["headers", "payload", "message_crc"])
def test_flipped_message_byte(where: str) -> None:
    meta = LINES[3]["_frame"]
    offset = meta["offset"]
    index = {
        "headers": offset + 12 + 3,
        "payload": offset + 12 + meta["headers_length"] + 5,
        "message_crc": offset + meta["total_length"] - 2,
    }[where]
    assert_fails(flip(STREAM, index), "message CRC mismatch")


@pytest.mark.parametrize("missing", [1, 4, 20, LINES[-1]["_frame"]["total_length"] - 1])
def test_truncated_last_frame_fails_at_close(missing: int) -> None:
    decoder = EventStreamDecoder()
    assert len(decoder.feed(STREAM[:-missing])) == 25
    with pytest.raises(FramingError, match="truncated"):
        decoder.close()
    with pytest.raises(FramingError, match="after a framing error"):
        decoder.feed(b"x")


def test_truncated_inside_the_prelude_fails_at_close() -> None:
    decoder = EventStreamDecoder()
    assert decoder.feed(STREAM[:5]) == []
    with pytest.raises(FramingError, match="truncated"):
        decoder.close()


def test_total_length_below_minimum() -> None:
    assert_fails(frame(15, 0), "below the minimum 16")


def test_headers_length_inconsistent_with_total_length() -> None:
    assert_fails(frame(20, 5), "does not fit in total_length 20")


def test_absurd_total_length_fails_from_the_prelude_alone() -> None:
    decoder = EventStreamDecoder()
    assert_fails(frame(0xFFFFFFFF, 0), "exceeds max_payload_bytes", decoder)


def test_absurd_headers_length_fails_from_the_prelude_alone() -> None:
    assert_fails(frame(0xFFFFFFFF, 0xFFFFFF00), "exceeds max_headers_bytes")


def test_bounds_are_configurable() -> None:
    wire = encode_message({"k": "v"}, b"x" * 100)
    assert len(decode_all(wire)) == 1
    (msg,) = EventStreamDecoder(max_payload_bytes=100, max_headers_bytes=6).feed(wire)
    assert msg.payload == b"x" * 100
    with pytest.raises(FramingError, match="max_payload_bytes=99"):
        EventStreamDecoder(max_payload_bytes=99).feed(wire)
    with pytest.raises(FramingError, match="max_headers_bytes=5"):
        EventStreamDecoder(max_headers_bytes=5).feed(wire)
    with pytest.raises(ValueError, match="negative"):
        EventStreamDecoder(max_payload_bytes=-1)


def test_bound_checked_before_the_frame_is_buffered() -> None:
    # Only the 12-byte prelude of a 1 GiB frame arrives: the error comes at once.
    decoder = EventStreamDecoder(max_payload_bytes=1024)
    with pytest.raises(FramingError, match="exceeds max_payload_bytes=1024"):
        decoder.feed(frame(1 << 30, 0))
    # A frame within bounds but incomplete is only waited for.
    decoder = EventStreamDecoder()
    assert decoder.feed(frame(1 << 20, 0, b"x" * 100)) == []


@pytest.mark.parametrize(
    "block",
    [
        pytest.param(b"\x05ab", id="name"),
        pytest.param(b"\x01a", id="type byte"),
        pytest.param(b"\x01a\x07\x00", id="string length"),
        pytest.param(b"\x01a\x07\x00\x05abc", id="string value"),
        pytest.param(b"\x01a\x06\x00\x05abc", id="bytes value"),
        pytest.param(b"\x01a\x04\x00\x00", id="i32"),
        pytest.param(b"\x01a\x05\x00\x00\x00\x00", id="i64"),
        pytest.param(b"\x01a\x08\x00", id="timestamp"),
        pytest.param(b"\x01a\x09" + bytes(15), id="uuid"),
        pytest.param(b"\x01a\x02", id="i8"),
    ],
)
def test_header_running_past_the_headers_block(block: bytes) -> None:
    # The payload after the block must not be read as the rest of the header.
    assert_fails(raw_frame(block, b"0123456789abcdef0123"), "runs past the headers block")


@pytest.mark.parametrize("kind", [10, 11, 255])
def test_unknown_header_type(kind: int) -> None:
    assert_fails(raw_frame(b"\x01a" + bytes((kind,))), f"unknown type {kind}")


def test_invalid_utf8_in_string_header() -> None:
    assert_fails(raw_frame(b"\x01a\x07\x00\x02\xc3\x28"), "not valid UTF-8")


def test_invalid_utf8_in_header_name() -> None:
    assert_fails(raw_frame(b"\x02\xff\xfe\x00"), "not valid UTF-8")
