"""SSE decoder and encoder: recorded streams, WHATWG rules, split-anywhere and round trips."""

from __future__ import annotations

import ast
import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

import gateway.framing.sse as sse_module
from gateway.errors import FramingError
from gateway.framing.sse import DONE
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.framing.sse import encode_comment
from gateway.framing.sse import encode_event
from tests.fixtures import FIXTURES

BOM = b"\xef\xbb\xbf"

# Events per recorded stream; see tests/wire_fixtures/README.md for what each holds.
EXPECTED_EVENTS = {
    "anthropic_error_event.sse": 1,
    "anthropic_text_then_tool.sse": 15,  # no blank line after the last event
    "anthropic_text_then_two_tools.sse": 18,
    "gemini_2_0_flash_function_call.sse": 1,  # CRLF
    "gemini_2_0_flash_text_after_tool.sse": 2,  # CRLF
    "gemini_function_calls.sse": 2,  # CRLF
    "gemini_parallel_function_calls.sse": 2,  # CRLF
    "openai_chat_parallel_tools.sse": 8,
    "openai_chat_parallel_tools_sdk_fixture.sse": 26,
    "openai_responses_function_calls.sse": 33,  # event: lines
    "openai_responses_reasoning_then_function_call.sse": 14,  # event: lines
}
SSE_FILES = sorted(p.name for p in FIXTURES.glob("*.sse"))
FIXTURE_BYTES = {name: (FIXTURES / name).read_bytes() for name in SSE_FILES}


def decode(*chunks: bytes, max_event_bytes: int = 8 * 1024 * 1024) -> list[SSEEvent]:
    decoder = SSEDecoder(max_event_bytes)
    events: list[SSEEvent] = []
    for chunk in chunks:
        events += decoder.feed(chunk)
    return events + decoder.close()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def reference_decode(stream: bytes) -> tuple[list[SSEEvent], int]:
    """A deliberately naive WHATWG reading, byte by byte, to check the real decoder against."""
    if stream.startswith(BOM):
        stream = stream[3:]
    lines: list[bytes] = []
    line = bytearray()
    i = 0
    while i < len(stream):
        byte = stream[i : i + 1]
        if byte in (b"\r", b"\n"):
            lines.append(bytes(line))
            line.clear()
            if byte == b"\r" and stream[i + 1 : i + 2] == b"\n":
                i += 1
        else:
            line += byte
        i += 1
    if line:
        lines.append(bytes(line))
    lines.append(b"")  # end of stream: flush the pending event

    events: list[SSEEvent] = []
    comments = 0
    data: list[bytes] | None = None
    event = ""
    event_id: str | None = None
    for text in lines:
        if not text:
            if data is not None:
                events.append(SSEEvent(b"\n".join(data), event, event_id))
            data, event, event_id = None, "", None
            continue
        if text.startswith(b":"):
            comments += 1
            continue
        name, colon, value = text.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if name == b"data":
            data = [*(data or []), value]
        elif name == b"event":
            event = value.decode("utf-8", "replace")
        elif name == b"id" and b"\x00" not in value:
            event_id = value.decode("utf-8", "replace")
    return events, comments


# --- recorded streams ---------------------------------------------------------------------


def test_every_sse_fixture_has_an_expected_count() -> None:
    assert sorted(EXPECTED_EVENTS) == SSE_FILES


@pytest.mark.parametrize("name", SSE_FILES)
def test_fixture_decodes_to_json_events(name: str) -> None:
    events = decode(FIXTURE_BYTES[name])
    assert len(events) == EXPECTED_EVENTS[name]
    for ev in events:
        if ev.data == b"[DONE]":
            continue
        payload = json.loads(ev.data)
        if ev.event:  # Anthropic and Responses name each event after its data's type
            assert payload["type"] == ev.event
        assert ev.id is None


def test_fixture_without_final_blank_line_flushes_last_event_at_close() -> None:
    data = FIXTURE_BYTES["anthropic_text_then_tool.sse"]
    assert not data.endswith(b"\n")
    decoder = SSEDecoder()
    events = decoder.feed(data)
    assert len(events) == 14
    assert decoder.close() == [SSEEvent(b'{"type":"message_stop"}', "message_stop")]


def test_openai_stream_ends_with_done() -> None:
    events = decode(FIXTURE_BYTES["openai_chat_parallel_tools.sse"])
    assert events[-1] == SSEEvent(b"[DONE]")
    assert all(ev.event == "" for ev in events)


@pytest.mark.parametrize("name", SSE_FILES)
def test_fixture_every_single_cut_and_byte_by_byte(name: str) -> None:
    data = FIXTURE_BYTES[name]
    whole = decode(data)
    assert decode(*(data[i : i + 1] for i in range(len(data)))) == whole
    for cut in range(len(data) + 1):
        assert decode(data[:cut], data[cut:]) == whole, cut


@pytest.mark.parametrize("name", SSE_FILES)
@given(data=st.data())
def test_fixture_split_anywhere_same_events(name: str, data: st.DataObject) -> None:
    stream = FIXTURE_BYTES[name]
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=40))
    assert decode(*split_at(stream, cuts)) == decode(stream)


def test_crlf_cut_between_cr_and_lf_in_gemini_fixture() -> None:
    data = FIXTURE_BYTES["gemini_function_calls.sse"]
    cuts = [i + 1 for i in range(len(data)) if data[i : i + 2] == b"\r\n"]
    assert cuts
    assert decode(*split_at(data, cuts)) == decode(data)


# --- WHATWG rules, one by one -------------------------------------------------------------


def test_single_data_line() -> None:
    assert decode(b'data: {"a":1}\n\n') == [SSEEvent(b'{"a":1}')]


def test_multi_line_data_joined_with_lf() -> None:
    assert decode(b"data: a\ndata: b\ndata:\ndata: c\n\n") == [SSEEvent(b"a\nb\n\nc")]


def test_event_and_id_fields() -> None:
    events = decode(b"event: ping\nid: 7\ndata: x\n\ndata: y\n\n")
    assert events == [SSEEvent(b"x", "ping", "7"), SSEEvent(b"y")]  # id is per event


def test_id_containing_nul_is_ignored() -> None:
    assert decode(b"id: a\x00b\ndata: x\n\n") == [SSEEvent(b"x")]
    assert decode(b"id: 1\nid: a\x00b\ndata: x\n\n") == [SSEEvent(b"x", id="1")]


def test_empty_id_is_kept() -> None:
    assert decode(b"id\ndata: x\n\n") == [SSEEvent(b"x", id="")]


def test_comments_counted_not_emitted() -> None:
    decoder = SSEDecoder()
    events = decoder.feed(b": keep-alive\n\n:\ndata: x\n: mid-event\n\n")
    assert events == [SSEEvent(b"x")]
    assert decoder.comments == 3


def test_retry_and_unknown_fields_ignored() -> None:
    assert decode(b"retry: 1000\nfoo: bar\ndata: x\nDATA: y\n\n") == [SSEEvent(b"x")]


def test_line_without_colon_is_a_field_with_empty_value() -> None:
    assert decode(b"data\n\n") == [SSEEvent(b"")]
    assert decode(b"event\ndata\n\n") == [SSEEvent(b"")]


def test_only_one_leading_space_removed() -> None:
    assert decode(b"data:x\n\n") == [SSEEvent(b"x")]
    assert decode(b"data:  x \n\n") == [SSEEvent(b" x ")]
    assert decode(b"event:  e\ndata: x\n\n") == [SSEEvent(b"x", " e")]
    assert decode(b"data: a: b\n\n") == [SSEEvent(b"a: b")]


def test_empty_data_line_dispatches_empty_data() -> None:
    assert decode(b"data:\n\n") == [SSEEvent(b"")]
    assert decode(b"data: \n\n") == [SSEEvent(b"")]


def test_event_without_data_not_dispatched_and_name_reset() -> None:
    assert decode(b"event: lonely\nid: 1\n\ndata: x\n\n") == [SSEEvent(b"x")]
    assert decode(b"event: lonely\n\n\n\n") == []


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"])
def test_line_ends(eol: bytes) -> None:
    stream = b"event: e" + eol + b"data: a" + eol + b"data: b" + eol + eol + b"data: c" + eol + eol
    assert decode(stream) == [SSEEvent(b"a\nb", "e"), SSEEvent(b"c")]


def test_mixed_line_ends() -> None:
    assert decode(b"data: a\rdata: b\r\ndata: c\n\r\n") == [SSEEvent(b"a\nb\nc")]


def test_cr_at_end_of_feed_then_lf_is_one_line_end() -> None:
    # Were the LF a second line end, the blank line would dispatch "a" on its own.
    assert decode(b"data: a\r", b"\ndata: b\r", b"\n\r", b"\n") == [SSEEvent(b"a\nb")]
    assert decode(b"data: a\r", b"", b"\ndata: b\r\n\r\n") == [SSEEvent(b"a\nb")]


def test_cr_then_cr_across_feeds_is_two_line_ends() -> None:
    assert decode(b"data: a\r", b"\rdata: b\r\r") == [SSEEvent(b"a"), SSEEvent(b"b")]


def test_bom_skipped_at_start() -> None:
    assert decode(BOM + b"data: x\n\n") == [SSEEvent(b"x")]


@pytest.mark.parametrize("cut", [1, 2, 3])
def test_bom_split_across_feeds(cut: int) -> None:
    stream = BOM + b"data: x\n\n"
    assert decode(stream[:cut], stream[cut:]) == [SSEEvent(b"x")]
    assert decode(*(stream[i : i + 1] for i in range(len(stream)))) == [SSEEvent(b"x")]


def test_bom_only_skipped_at_very_start() -> None:
    # A second BOM, or one later in the stream, is part of the field name: unknown, ignored.
    assert decode(BOM + BOM + b"data: x\n\n") == []
    assert decode(b"data: x\n\n" + BOM + b"data: y\n\n") == [SSEEvent(b"x")]


def test_partial_bom_then_other_bytes() -> None:
    assert decode(b"\xef\xbb", b"data: x\n\n") == []  # b"\xef\xbbdata" is an unknown field
    assert decode(b"\xef") == []


def test_no_trailing_blank_line_flushed_at_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\n\ndata: b\n") == [SSEEvent(b"a")]
    assert decoder.close() == [SSEEvent(b"b")]


def test_partial_last_line_taken_as_complete_at_close() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"event: e\ndata: a\ndata: b") == []
    assert decoder.close() == [SSEEvent(b"a\nb", "e")]


def test_close_with_nothing_pending() -> None:
    assert SSEDecoder().close() == []
    assert decode(b"data: a\n\n") == [SSEEvent(b"a")]
    assert decode(b"event: e\n") == []


def test_decoder_is_new_after_close() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"\xef\xbb\xbfevent: e\ndata: a")
    assert decoder.close() == [SSEEvent(b"a", "e")]
    assert decoder.feed(BOM + b"data: b\n\n") == [SSEEvent(b"b")]
    assert decoder.close() == []


def test_non_utf8_event_name_is_replaced_not_fatal() -> None:
    assert decode(b"event: \xff\ndata: x\n\n") == [SSEEvent(b"x", "\ufffd")]


def test_data_keeps_raw_bytes() -> None:
    assert decode(b"data: \xff\x00\n\n") == [SSEEvent(b"\xff\x00")]


def test_events_in_one_feed_and_across_feeds() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: 1\n\ndata: 2\n\ndata: 3") == [SSEEvent(b"1"), SSEEvent(b"2")]
    assert decoder.feed(b"\n") == []
    assert decoder.feed(b"\n") == [SSEEvent(b"3")]
    assert decoder.close() == []


# --- the size bound -----------------------------------------------------------------------


def test_bound_on_one_line() -> None:
    line = b"data: " + b"x" * 94  # 100 bytes
    assert decode(line + b"\n\n", max_event_bytes=100) == [SSEEvent(b"x" * 94)]
    with pytest.raises(FramingError, match="max_event_bytes=99"):
        decode(line + b"\n\n", max_event_bytes=99)


def test_bound_on_accumulated_data() -> None:
    stream = b"data: aaaa\n" * 10 + b"\n"
    with pytest.raises(FramingError, match="max_event_bytes=30"):
        decode(stream, max_event_bytes=30)
    assert len(decode(stream * 3, max_event_bytes=100)) == 3  # the bound is per event


def test_bound_on_other_fields() -> None:
    with pytest.raises(FramingError):
        decode(b"event: " + b"e" * 100 + b"\n", max_event_bytes=50)
    with pytest.raises(FramingError):
        decode(b": " + b"c" * 100 + b"\n", max_event_bytes=50)


def test_bound_on_unfinished_line_in_one_feed() -> None:
    decoder = SSEDecoder(max_event_bytes=1024)
    with pytest.raises(FramingError):
        decoder.feed(b"data: " + b"x" * 2000)


def test_no_newline_fails_early_without_buffering_it_all() -> None:
    mib = 1024 * 1024
    piece = b"x" * (64 * 1024)
    decoder = SSEDecoder(max_event_bytes=mib)
    fed = 0
    error = None
    while fed < 64 * mib:
        try:
            decoder.feed(piece)
        except FramingError as exc:
            error = exc
            break
        fed += len(piece)
    assert error is not None
    assert f"max_event_bytes={mib}" in str(error)
    assert fed == mib  # the piece that took it past 1 MiB raised


def test_max_event_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        SSEDecoder(0)


# --- arbitrary streams against the naive reference ----------------------------------------

TOKENS = [
    b"data",
    b"data:",
    b"data: ",
    b"event:",
    b"event: e",
    b"id:",
    b"id: 1",
    b"retry: 5",
    b"foo",
    b":",
    b" ",
    b"x",
    b"{}",
    b"\xc3\xa9",
    b"\xff",
    b"\x00",
    b"\n",
    b"\n",
    b"\r",
    b"\r\n",
    BOM,
    b"\xef",
]
streams = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=60).map(b"".join),
    st.binary(max_size=200),
)


@given(stream=streams, data=st.data())
def test_arbitrary_stream_matches_reference_for_any_split(
    stream: bytes, data: st.DataObject
) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for chunk in split_at(stream, cuts):
        events += decoder.feed(chunk)
    events += decoder.close()
    assert (events, decoder.comments) == reference_decode(stream)


@given(stream=streams, limit=st.integers(1, 60), data=st.data())
def test_bound_does_not_depend_on_the_split(stream: bytes, limit: int, data: st.DataObject) -> None:
    def run(chunks: list[bytes]) -> list[SSEEvent] | None:
        try:
            return decode(*chunks, max_event_bytes=limit)
        except FramingError:
            return None

    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=20))
    assert run(split_at(stream, cuts)) == run([stream])


# --- encoder ------------------------------------------------------------------------------


def test_encode_fast_path() -> None:
    assert encode_event(b'{"a":1}') == b'data: {"a":1}\n\n'
    assert encode_event(b"") == b"data: \n\n"


def test_encode_multi_line_and_fields() -> None:
    assert encode_event(b"a\nb\r\nc\rd", event="e", id="7") == (
        b"event: e\nid: 7\ndata: a\ndata: b\ndata: c\ndata: d\n\n"
    )
    assert encode_event(b"x", event="message_stop") == b"event: message_stop\ndata: x\n\n"


@pytest.mark.parametrize(
    ("event", "event_id"),
    [("a\nb", None), ("a\rb", None), (None, "1\n"), (None, "\r"), (None, "a\x00")],
)
def test_encode_rejects_line_ends_in_event_and_id(event: str | None, event_id: str | None) -> None:
    with pytest.raises(ValueError, match="must not contain"):
        encode_event(b"x", event=event, id=event_id)


def test_encode_comment_and_done() -> None:
    assert encode_comment() == b": keep-alive\n\n"
    assert encode_comment("hi") == b": hi\n\n"
    with pytest.raises(ValueError, match="must not contain"):
        encode_comment("a\nb")
    assert DONE == b"data: [DONE]\n\n"
    decoder = SSEDecoder()
    assert decoder.feed(encode_comment() + DONE) == [SSEEvent(b"[DONE]")]
    assert decoder.comments == 1


no_line_end = st.text().filter(lambda s: "\n" not in s and "\r" not in s)
encoded_events = st.tuples(
    st.binary(max_size=100)
    | st.lists(st.sampled_from([b"a", b"\n", b"\r", b"\r\n", b" ", b":"])).map(b"".join),
    st.none() | no_line_end,
    st.none() | no_line_end.filter(lambda s: "\x00" not in s),
)


@given(events=st.lists(encoded_events, max_size=5), data=st.data())
def test_encode_decode_round_trip(
    events: list[tuple[bytes, str | None, str | None]], data: st.DataObject
) -> None:
    """Decoding what was encoded gives the event back, with CRLF and CR in data read as LF."""
    stream = b"".join(encode_event(d, event=e, id=i) for d, e, i in events)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    expected = [
        SSEEvent(d.replace(b"\r\n", b"\n").replace(b"\r", b"\n"), e or "", i) for d, e, i in events
    ]
    assert decode(*split_at(stream, cuts)) == expected


# --- the module's own rules ---------------------------------------------------------------


def test_module_imports_nothing_that_does_io() -> None:
    tree = ast.parse(Path(sse_module.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module or "")
    assert imported <= {"__future__", "msgspec", "gateway.errors"}


@settings(max_examples=20)
@given(stream=streams)
def test_close_is_idempotent(stream: bytes) -> None:
    decoder = SSEDecoder()
    decoder.feed(stream)
    decoder.close()
    assert decoder.close() == []
