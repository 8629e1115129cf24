"""Chunked bodies cut anywhere: every size-line form the parser accepts (padding, leading zeros,
extensions, trailers), and malformed size lines, chunk ends and over-long lines, which must
raise with the read that completes the fault, never earlier or later, whatever the cuts."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.errors import UpstreamProtocolError
from gateway.framing.http1 import END
from gateway.framing.http1 import MAX_CHUNK_LINE
from gateway.framing.http1 import MAX_HEAD_BYTES
from gateway.framing.http1 import ResponseHead
from gateway.framing.http1 import ResponseParser

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

_token = st.text(alphabet="abcxyz019-", min_size=1, max_size=6).map(str.encode)
_quoted = st.text(alphabet='ab ;=,\\"', max_size=8).map(
    lambda text: b'"' + text.replace("\\", "").replace('"', "").encode() + b'"'
)
_extension = st.tuples(
    st.sampled_from([b"", b" ", b"\t"]), _token, st.none() | _token | _quoted
).map(lambda e: e[0] + b";" + e[1] + (b"" if e[2] is None else b"=" + e[2]))
_size_format = st.sampled_from(["x", "X", "03x", "08X"])
_padding = st.sampled_from([b"", b"", b" ", b"\t", b" \t"])  # after the digits
# Data that looks like framing, so that a parser reading it as framing gets caught.
_data = st.binary(min_size=1, max_size=30) | st.sampled_from(
    [b"\r\n", b"0\r\n\r\n", b"a\r\n", b"data: {}\n\n", b";x=1\r\n"]
)
_trailer = st.tuples(
    st.sampled_from([b"X-Trailer", b"Server-Timing"]),
    st.binary(max_size=10).map(lambda v: v.replace(b"\r", b"").replace(b"\n", b"")),
)

BAD_SIZES = [b"zz", b"", b"  ", b"+5", b"-1", b"0x5", b"0_5", b"5 5", b";ext", b"g"]
BAD_CHUNK_ENDS = [b"XX", b"\n\r", b"\r\r", b"\rX", b"X\n", b"\n\n"]


@dataclass
class Chunked:
    raw: bytes
    body_mask: bytes  # 1 where raw[i] is a byte of the body
    fault: tuple[int, str] | None  # (index of the byte that completes it, error text)


@st.composite
def chunked_responses(draw: st.DrawFn) -> Chunked:
    raw = bytearray(HEAD)
    mask = bytearray(len(HEAD))

    def add(data: bytes, *, body: bool = False) -> None:
        raw.extend(data)
        mask.extend((b"\x01" if body else b"\x00") * len(data))

    parts = draw(st.lists(_data, max_size=8))
    kind = draw(st.sampled_from(["none", "none", "size", "end", "long"]))
    # the chunk that carries the fault; len(parts) is the last (zero) chunk
    where = draw(st.integers(0, len(parts) if kind != "end" else max(len(parts) - 1, 0)))
    if kind == "end" and not parts:
        kind = "none"
    fault: tuple[int, str] | None = None
    for i, part in enumerate([*parts, b""]):
        size = format(len(part), draw(_size_format)).encode()
        line = size + draw(_padding) + b"".join(draw(st.lists(_extension, max_size=2)))
        if fault is None and i == where and kind == "size":
            line = draw(st.sampled_from(BAD_SIZES))
            fault = (len(raw) + len(line) + 1, "bad chunk size")
        elif fault is None and i == where and kind == "long":
            filler = MAX_CHUNK_LINE + 1 + draw(st.integers(0, 40)) - len(line) - len(b";x=")
            line += b";x=" + b"v" * filler
            fault = (len(raw) + MAX_CHUNK_LINE, "line too long")
        add(line + b"\r\n")
        if not part:
            break
        add(part, body=True)
        if fault is None and i == where and kind == "end":
            fault = (len(raw) + 1, "no CRLF after a chunk")
            add(draw(st.sampled_from(BAD_CHUNK_ENDS)))
        else:
            add(b"\r\n")
    for name, value in draw(st.lists(_trailer, max_size=3)):
        add(name + b": " + value + b"\r\n")
    add(b"\r\n")
    return Chunked(bytes(raw), bytes(mask), fault)


def cut(raw: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(raw)]
    return [raw[a:b] for a, b in itertools.pairwise(bounds)]


def check(built: Chunked, reads: list[bytes]) -> None:
    """Feed `reads`: after each, the body so far is exactly the body bytes received so far;
    the response ends with its last byte, or the fault raises in the read holding its byte."""
    parser = ResponseParser()
    body = bytearray()
    expected = bytearray()
    fed = 0
    for read in reads:
        start, fed = fed, fed + len(read)
        if built.fault is not None and start <= built.fault[0] < fed:
            with pytest.raises(UpstreamProtocolError, match=re.escape(built.fault[1])):
                parser.feed(read)
            return
        events = parser.feed(read)
        expected += bytes(b for b, m in zip(read, built.body_mask[start:fed], strict=True) if m)
        for event in events:
            if isinstance(event, bytes):
                assert event, "an empty body event reads as the end of the body"
                body += event
            elif event is not END:
                assert isinstance(event, ResponseHead)
                assert event.headers["transfer-encoding"] == "chunked"
        assert body == expected, "body bytes held back or invented"
        assert parser.done is (fed == len(built.raw)), "END early or late"
        assert (END in events) is (parser.done and start < fed)
    assert built.fault is None, "the fault was not raised"
    assert parser.close() == []


@settings(max_examples=400, deadline=None)
@given(built=chunked_responses(), data=st.data())
def test_chunked_cut_anywhere(built: Chunked, data: st.DataObject) -> None:
    cuts = data.draw(st.lists(st.integers(0, len(built.raw)), max_size=40))
    check(built, cut(built.raw, cuts))


@settings(max_examples=100, deadline=None)
@given(built=chunked_responses())
def test_chunked_in_one_read_and_in_reads_of_one_chunk(built: Chunked) -> None:
    check(built, [built.raw])
    # the head, then one read per chunk (roughly: cut after every CRLF that ends some data)
    ends = [i + 3 for i, m in enumerate(built.body_mask[:-1]) if m and not built.body_mask[i + 1]]
    check(built, cut(built.raw, [len(HEAD), *ends]))


@settings(max_examples=40, deadline=None)
@given(built=chunked_responses())
def test_chunked_one_byte_reads(built: Chunked) -> None:
    check(built, [built.raw[i : i + 1] for i in range(len(built.raw))])


def test_many_chunks_in_one_read_then_a_partial_one() -> None:
    """The run of whole chunks stops at one that continues in the next read; its data so far
    comes out at once, and the rest follows."""
    parser = ResponseParser()
    events = parser.feed(HEAD + b"3\r\nabc\r\n2;x=y\r\nde\r\n0A\r\n01234")
    assert events[1:] == [b"abc", b"de", b"01234"]
    assert parser.feed(b"56789\r") == [b"56789"]
    assert parser.feed(b"\n1") == []
    assert parser.feed(b"\r\nz\r\n0\r\n\r\n") == [b"z", END]
    assert parser.done


def test_a_size_line_of_exactly_the_bound_is_accepted() -> None:
    line = b"5;x=" + b"v" * (MAX_CHUNK_LINE - 4)
    assert len(line) == MAX_CHUNK_LINE
    events = ResponseParser().feed(HEAD + line + b"\r\nhello\r\n0\r\n\r\n")
    assert events[1:] == [b"hello", END]
    with pytest.raises(UpstreamProtocolError, match="line too long"):
        ResponseParser().feed(HEAD + line + b"v\r\nhello\r\n0\r\n\r\n")


@pytest.mark.parametrize("cut", ["whole", "before-cr", "between-cr-and-lf", "after-lf"])
def test_lines_of_exactly_the_bound_are_accepted_however_cut(cut: str) -> None:
    """A size line and a trailer line of exactly their bound (CRLF not counted): accepted
    whether a read ends before, inside or after their CRLF."""
    size_line = b"5;x=" + b"v" * (MAX_CHUNK_LINE - 4)
    trailer = b"X-T: " + b"t" * (MAX_HEAD_BYTES - 5)
    body = size_line + b"\r\nhello\r\n0\r\n" + trailer + b"\r\n\r\n"
    cuts = []
    for line in (size_line, trailer):
        at = body.index(line) + len(line)
        cuts.append({"whole": None, "before-cr": at, "between-cr-and-lf": at + 1}.get(cut, at + 2))
    parser = ResponseParser()
    events = parser.feed(HEAD)
    start = 0
    for at in [c for c in cuts if c is not None]:
        events += parser.feed(body[start:at])
        start = at
    events += parser.feed(body[start:])
    assert events[1:] == [b"hello", END]
    assert parser.done
