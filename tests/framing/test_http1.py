"""The sans-IO HTTP/1.1 response parser and request encoder: framing, errors, split-anywhere."""

from __future__ import annotations

import itertools
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
from gateway.framing.http1 import encode_request

CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
EARLY_HINTS = b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"


def feed_all(parser: ResponseParser, *chunks: bytes) -> list[object]:
    events: list[object] = []
    for chunk in chunks:
        events.extend(parser.feed(chunk))
    return events


def parse(raw: bytes) -> tuple[ResponseHead, bytes, list[object]]:
    """One feed; returns the head, the joined body and the raw events."""
    events = ResponseParser().feed(raw)
    heads = [e for e in events if isinstance(e, ResponseHead)]
    assert len(heads) == 1
    body = b"".join(e for e in events if isinstance(e, bytes))
    return heads[0], body, events


# --- framing ---------------------------------------------------------------------------------


def test_content_length_body() -> None:
    parser = ResponseParser()
    assert not parser.started
    assert not parser.done
    events = parser.feed(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n")
    assert events == []
    assert parser.started  # a partial head counts
    assert parser.head is None
    events = parser.feed(b"Content-Length: 11\r\n\r\nhello")
    head = ResponseHead(
        200, "OK", {"content-type": "application/json", "content-length": "11"}, True
    )
    assert events == [head, b"hello"]
    assert parser.head == head
    assert not parser.done
    assert parser.feed(b" world") == [b" world", END]
    assert parser.done
    assert parser.close() == []  # the connection closing after the end is no truncation


def test_content_length_zero_ends_with_the_head() -> None:
    head, body, events = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
    assert events == [head, END]
    assert body == b""


def test_chunked_body_with_extensions_and_trailers() -> None:
    raw = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5;ext=1\r\nhello\r\n"
        b'1 ; name="quoted"\r\n \r\n'
        b"A\r\n0123456789\r\n"
        b"0;last=yes\r\nX-Trailer: one\r\nX-Other: two\r\n\r\n"
    )
    head, body, events = parse(raw)
    assert head.headers == {"transfer-encoding": "chunked"}
    assert head.keep_alive
    assert body == b"hello 0123456789"
    assert events[-1] is END
    assert events.count(END) == 1


def test_chunked_body_without_trailers() -> None:
    _, body, events = parse(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"
    )
    assert body == b"abc"
    assert events[-1] is END


def test_transfer_encoding_ending_in_chunked_wins_over_content_length() -> None:
    _, body, events = parse(
        b"HTTP/1.1 200 OK\r\nContent-Length: 999\r\nTransfer-Encoding: Chunked\r\n\r\n"
        b"2\r\nok\r\n0\r\n\r\n"
    )
    assert body == b"ok"
    assert events[-1] is END


def test_close_delimited_body() -> None:
    parser = ResponseParser()
    events = parser.feed(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nsome ")
    assert isinstance(events[0], ResponseHead)
    assert events[0].keep_alive is False  # the body ends with the connection
    assert events[1:] == [b"some "]
    assert parser.feed(b"bytes") == [b"bytes"]
    assert not parser.done
    assert parser.close() == [END]
    assert parser.done
    assert parser.close() == []


def test_close_delimited_http10_keep_alive_is_still_false() -> None:
    parser = ResponseParser()
    (head,) = parser.feed(b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\n")
    assert isinstance(head, ResponseHead)
    assert head.keep_alive is False


@pytest.mark.parametrize("status", [204, 304])
def test_no_body_statuses(status: int) -> None:
    # Even a Content-Length (304 repeats the representation's) frames no body.
    parser = ResponseParser()
    events = parser.feed(f"HTTP/1.1 {status} X\r\nContent-Length: 42\r\n\r\n".encode())
    assert len(events) == 2
    assert isinstance(events[0], ResponseHead)
    assert events[0].status == status
    assert events[1] is END
    assert parser.done


def test_interim_heads_are_skipped() -> None:
    parser = ResponseParser()
    assert parser.feed(CONTINUE) == []
    assert parser.head is None
    assert parser.feed(EARLY_HINTS) == []
    assert parser.head is None
    events = parser.feed(b"HTTP/1.1 201 Created\r\nContent-Length: 2\r\n\r\nok")
    assert events == [ResponseHead(201, "Created", {"content-length": "2"}, True), b"ok", END]


def test_interim_heads_in_the_same_feed_as_the_response() -> None:
    head, body, events = parse(
        CONTINUE + EARLY_HINTS + CONTINUE + b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nx"
    )
    assert head.status == 200
    assert "link" not in head.headers  # the 103's headers are not merged in
    assert body == b"x"
    assert events[-1] is END


@pytest.mark.parametrize(
    ("version", "connection", "keep_alive"),
    [
        ("HTTP/1.1", None, True),
        ("HTTP/1.1", "close", False),
        ("HTTP/1.1", "Close", False),
        ("HTTP/1.1", "keep-alive", True),
        ("HTTP/1.0", None, False),
        ("HTTP/1.0", "keep-alive", True),
        ("HTTP/1.0", "Keep-Alive", True),
        ("HTTP/1.0", "close", False),
    ],
)
def test_keep_alive(version: str, connection: str | None, keep_alive: bool) -> None:
    extra = f"Connection: {connection}\r\n" if connection else ""
    head, _, _ = parse(f"{version} 200 OK\r\n{extra}Content-Length: 0\r\n\r\n".encode())
    assert head.keep_alive is keep_alive


def test_header_names_lower_cased_and_repeats_joined() -> None:
    head, _, _ = parse(
        b"HTTP/1.1 200 OK\r\n"
        b"X-Request-ID: abc\r\n"
        b"Set-Cookie: a=1\r\n"
        b"set-cookie: b=2\r\n"
        b"SET-COOKIE:c=3  \r\n"
        b"Content-Length: 0\r\n\r\n"
    )
    assert head.headers == {
        "x-request-id": "abc",
        "set-cookie": "a=1, b=2, c=3",
        "content-length": "0",
    }


def test_status_line_without_reason_and_with_spaces_in_reason() -> None:
    head, _, _ = parse(b"HTTP/1.1 429\r\nContent-Length: 0\r\n\r\n")
    assert (head.status, head.reason) == (429, "")
    head, _, _ = parse(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
    assert (head.status, head.reason) == (503, "Service Unavailable")


def test_empty_feeds_are_harmless() -> None:
    parser = ResponseParser()
    assert parser.feed(b"") == []
    assert not parser.started
    events = feed_all(parser, b"HTTP/1.1 200 OK\r\n", b"", b"Content-Length: 1\r\n\r\n", b"", b"x")
    assert events[-2:] == [b"x", END]
    assert parser.feed(b"") == []


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "status_line",
    [
        b"HTTP/2 200 OK",
        b"HTTP/1.1 2000 OK",
        b"HTTP/1.1 20 OK",
        b"HTTP/1.1 abc OK",
        b"HTTP/1.1  200 OK",
        b"ICY 200 OK",
        b"garbage",
        b"",
    ],
)
def test_malformed_status_line(status_line: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="status line"):
        ResponseParser().feed(status_line + b"\r\nContent-Length: 0\r\n\r\n")


@pytest.mark.parametrize(
    "line", [b"NoColonHere", b": no name", b"Name : space before colon", b" Folded: x"]
)
def test_malformed_header_line(line: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="header line"):
        ResponseParser().feed(b"HTTP/1.1 200 OK\r\n" + line + b"\r\nContent-Length: 0\r\n\r\n")


def test_head_over_the_bound_fed_in_pieces_raises_once_past_it() -> None:
    parser = ResponseParser()
    piece = b"X-Pad: " + b"a" * 1000 + b"\r\n"
    fed = len(b"HTTP/1.1 200 OK\r\n")
    assert parser.feed(b"HTTP/1.1 200 OK\r\n") == []
    with pytest.raises(UpstreamProtocolError, match="too large"):  # noqa: PT012
        for _ in range(2 * MAX_HEAD_BYTES // len(piece)):  # bounded: raises well before
            assert parser.feed(piece) == []
            fed += len(piece)
    # It kept accepting while within the bound and raised with the first piece past it.
    assert MAX_HEAD_BYTES - len(piece) < fed <= MAX_HEAD_BYTES


def test_head_over_the_bound_fed_one_byte_at_a_time() -> None:
    parser = ResponseParser()
    raw = b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * (MAX_HEAD_BYTES + 10)
    fed = 0
    with pytest.raises(UpstreamProtocolError, match="too large"):  # noqa: PT012
        for i in range(len(raw)):
            parser.feed(raw[i : i + 1])
            fed += 1
    assert fed == MAX_HEAD_BYTES  # the byte after the bound raised


def test_complete_head_over_the_bound_in_one_feed_raises() -> None:
    pad = b"".join(b"X-Pad-%d: %s\r\n" % (i, b"a" * 1000) for i in range(80))
    raw = b"HTTP/1.1 200 OK\r\n" + pad + b"Content-Length: 0\r\n\r\n"
    assert len(raw) > MAX_HEAD_BYTES
    with pytest.raises(UpstreamProtocolError):
        feed_all(ResponseParser(), *(raw[i : i + 1024] for i in range(0, len(raw), 1024)))
    with pytest.raises(UpstreamProtocolError):
        ResponseParser().feed(raw)


CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("size_line", [b"zz", b"g", b"", b"  ", b"-1", b"5 5", b";ext"])
def test_bad_chunk_size(size_line: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="chunk size"):
        ResponseParser().feed(CHUNKED_HEAD + size_line + b"\r\nhello\r\n0\r\n\r\n")


@pytest.mark.parametrize("size_line", [b"0x5", b"+5", b"0_5"])
def test_chunk_size_python_int_syntax_is_rejected(size_line: bytes) -> None:
    with pytest.raises(UpstreamProtocolError):
        ResponseParser().feed(CHUNKED_HEAD + size_line + b"\r\nhello\r\n0\r\n\r\n")


def test_chunk_size_line_over_the_bound_raises() -> None:
    parser = ResponseParser()
    parser.feed(CHUNKED_HEAD + b"5;ext=")
    with pytest.raises(UpstreamProtocolError, match="line too long"):  # noqa: PT012
        for _ in range(2 * MAX_CHUNK_LINE // 100):  # bounded: raises well before
            assert parser.feed(b"x" * 100) == []


@pytest.mark.parametrize("after", [b"XX", b"X\r", b"\n\r", b"\r\r"])
def test_chunk_without_crlf_after_data(after: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="no CRLF"):
        ResponseParser().feed(CHUNKED_HEAD + b"5\r\nhello" + after + b"0\r\n\r\n")


def test_chunk_without_crlf_after_data_fed_byte_by_byte() -> None:
    raw = CHUNKED_HEAD + b"5\r\nhelloX\n0\r\n\r\n"
    parser = ResponseParser()
    with pytest.raises(UpstreamProtocolError, match="no CRLF"):  # noqa: PT012
        for i in range(len(raw)):
            parser.feed(raw[i : i + 1])


@pytest.mark.parametrize("coding", ["gzip", "chunked, gzip", "deflate", "identity"])
def test_unsupported_transfer_encoding(coding: str) -> None:
    with pytest.raises(UpstreamProtocolError, match="transfer-encoding"):
        ResponseParser().feed(
            f"HTTP/1.1 200 OK\r\nTransfer-Encoding: {coding}\r\n\r\n".encode() + b"data"
        )


@pytest.mark.parametrize("length", ["-1", "abc", "1.5", "", "0x10", "5, 6"])
def test_malformed_content_length(length: str) -> None:
    with pytest.raises(UpstreamProtocolError, match="content-length"):
        ResponseParser().feed(f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\n".encode())


@pytest.mark.parametrize("length", ["+5", "0_5"])
def test_content_length_python_int_syntax_is_rejected(length: str) -> None:
    with pytest.raises(UpstreamProtocolError):
        ResponseParser().feed(f"HTTP/1.1 200 OK\r\nContent-Length: {length}\r\n\r\nhello".encode())


@pytest.mark.parametrize(
    "response",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        b"HTTP/1.1 204 No Content\r\n\r\n",
        CHUNKED_HEAD + b"2\r\nok\r\n0\r\nX-T: 1\r\n\r\n",
    ],
)
def test_bytes_after_the_response_ended(response: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="after its response ended"):
        ResponseParser().feed(response + b"HTTP/1.1 200 OK\r\n")
    parser = ResponseParser()
    assert parser.feed(response)[-1] is END
    with pytest.raises(UpstreamProtocolError, match="after its response ended"):
        parser.feed(b"x")


@pytest.mark.parametrize(
    "partial",
    [
        b"",
        b"HTTP/1.1 200 OK\r\nContent-Len",
        CONTINUE,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhello",
        CHUNKED_HEAD,
        CHUNKED_HEAD + b"5\r\nhel",
        CHUNKED_HEAD + b"5\r\nhello",
        CHUNKED_HEAD + b"5\r\nhello\r\n",
        CHUNKED_HEAD + b"5\r\nhello\r\n0\r\n",
        CHUNKED_HEAD + b"5\r\nhello\r\n0\r\nX-Trailer: 1\r\n",
    ],
)
def test_close_before_the_end_is_a_truncation(partial: bytes) -> None:
    parser = ResponseParser()
    parser.feed(partial)
    with pytest.raises(UpstreamProtocolError, match="before its response was complete"):
        parser.close()


def test_started_after_an_interim_head() -> None:
    parser = ResponseParser()
    parser.feed(CONTINUE)
    assert parser.started


# --- reuse -----------------------------------------------------------------------------------


def test_reset_then_a_second_response() -> None:
    parser = ResponseParser()
    first = parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\none")
    assert first[-1] is END
    assert parser.done
    parser.reset()
    assert not parser.done
    assert not parser.started
    assert parser.head is None
    second = feed_all(parser, CHUNKED_HEAD[:10], CHUNKED_HEAD[10:] + b"3\r\ntwo\r\n", b"0\r\n\r\n")
    assert second[0] == ResponseHead(200, "OK", {"transfer-encoding": "chunked"}, True)
    assert second[1:] == [b"two", END]
    parser.reset()
    third = parser.feed(b"HTTP/1.1 204 No Content\r\n\r\n")
    assert [type(e) for e in third] == [ResponseHead, type(END)]
    assert parser.head is not None
    assert parser.head.status == 204


def test_reset_after_a_close_delimited_response() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\n\r\nabc")
    assert parser.close() == [END]
    parser.reset()
    events = parser.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nz")
    assert events[1:] == [b"z", END]


# --- split anywhere, same answer -------------------------------------------------------------


@dataclass
class Built:
    raw: bytes
    body_mask: bytes  # 1 where raw[i] is a byte of the body
    head_end: int  # offset just past the final head's CRLFCRLF
    close_delimited: bool
    status: int
    headers: dict[str, str]
    keep_alive: bool

    @property
    def body(self) -> bytes:
        return bytes(b for b, m in zip(self.raw, self.body_mask, strict=True) if m)


class Builder:
    def __init__(self) -> None:
        self.raw = bytearray()
        self.mask = bytearray()

    def add(self, data: bytes, *, body: bool = False) -> None:
        self.raw += data
        self.mask += (b"\x01" if body else b"\x00") * len(data)


_trailer = st.tuples(
    st.sampled_from(["X-Trailer", "Server-Timing", "X-Checksum"]),
    st.text(alphabet="abcdefxyz0123456789=;", max_size=12),
)
_extension = st.sampled_from([b"", b";ext=1", b"; a=b", b';name="v"', b";x"])


@st.composite
def responses(draw: st.DrawFn) -> Built:
    framing = draw(st.sampled_from(["length", "chunked", "close"]))
    parts = draw(st.lists(st.binary(min_size=1, max_size=40), max_size=10))
    builder = Builder()
    for interim in draw(st.lists(st.sampled_from([CONTINUE, EARLY_HINTS]), max_size=2)):
        builder.add(interim)
    status = draw(st.sampled_from([200, 201, 400, 500]))
    headers = {"content-type": "text/event-stream", "x-request-id": "req-1"}
    body = b"".join(parts)
    if framing == "length":
        headers["content-length"] = str(len(body))
    elif framing == "chunked":
        headers["transfer-encoding"] = "chunked"
    lines = [f"HTTP/1.1 {status} Whatever Reason"]
    lines += [f"{name.title()}: {value}" for name, value in headers.items()]
    builder.add(("\r\n".join(lines) + "\r\n\r\n").encode())
    head_end = len(builder.raw)
    if framing == "chunked":
        for part in parts:
            size = format(len(part), draw(st.sampled_from(["x", "X", "04x"]))).encode()
            builder.add(size + draw(_extension) + b"\r\n")
            builder.add(part, body=True)
            builder.add(b"\r\n")
        builder.add(b"0" + draw(_extension) + b"\r\n")
        for name, value in draw(st.lists(_trailer, max_size=3)):
            builder.add(f"{name}: {value}\r\n".encode())
        builder.add(b"\r\n")
    else:
        builder.add(body, body=True)
    return Built(
        raw=bytes(builder.raw),
        body_mask=bytes(builder.mask),
        head_end=head_end,
        close_delimited=framing == "close",
        status=status,
        headers=headers,
        keep_alive=framing != "close",
    )


@dataclass
class Outcome:
    heads: list[tuple[int, ResponseHead]]  # (bytes fed when it came, head)
    body: bytes
    end_at: int | None  # bytes fed when END came; -1 for END from close()


def run(built: Built, chunks: list[bytes]) -> Outcome:
    """Feed `chunks`, checking after every feed that the body delivered so far is exactly the
    body bytes among the input so far (no bytes held back, none invented)."""
    parser = ResponseParser()
    heads: list[tuple[int, ResponseHead]] = []
    body = bytearray()
    end_at: int | None = None
    expected = bytearray()
    fed = 0
    for chunk in chunks:
        events = parser.feed(chunk)
        mask = built.body_mask[fed : fed + len(chunk)]
        expected += bytes(b for b, m in zip(chunk, mask, strict=True) if m)
        fed += len(chunk)
        for event in events:
            assert end_at is None, "an event after END"
            if isinstance(event, ResponseHead):
                assert not heads, "two heads"
                heads.append((fed, event))
            elif isinstance(event, bytes):
                assert event, "an empty body event reads as the end of the body"
                assert heads, "body before the head"
                body += event
            else:
                assert event is END
                end_at = fed
        if fed >= built.head_end:
            assert heads, "the head was held back"
        assert body == expected
        assert parser.done is (end_at is not None)
    if built.close_delimited:
        assert end_at is None
        assert parser.close() == [END]
        end_at = -1
    assert parser.done
    return Outcome(heads, bytes(body), end_at)


def check(built: Built, chunks: list[bytes]) -> None:
    assert b"".join(chunks) == built.raw
    outcome = run(built, chunks)
    whole = run(built, [built.raw])
    expected_head = ResponseHead(built.status, "Whatever Reason", built.headers, built.keep_alive)
    assert [h for _, h in outcome.heads] == [h for _, h in whole.heads] == [expected_head]
    assert outcome.heads[0][0] >= built.head_end  # not before its last byte came
    assert outcome.body == whole.body == built.body
    assert outcome.end_at == whole.end_at == (-1 if built.close_delimited else len(built.raw))


@settings(max_examples=300, deadline=None)
@given(built=responses(), data=st.data())
def test_split_anywhere_same_answer(built: Built, data: st.DataObject) -> None:
    cuts = sorted(data.draw(st.lists(st.integers(0, len(built.raw)), max_size=30)))
    bounds = [0, *cuts, len(built.raw)]
    chunks = [built.raw[a:b] for a, b in itertools.pairwise(bounds)]
    check(built, chunks)


@settings(max_examples=60, deadline=None)
@given(built=responses())
def test_one_byte_feeds_same_answer(built: Built) -> None:
    check(built, [built.raw[i : i + 1] for i in range(len(built.raw))])


def test_one_byte_feeds_of_a_long_chunked_stream() -> None:
    builder = Builder()
    builder.add(CONTINUE)
    builder.add(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    head_end = len(builder.raw)
    for i in range(60):
        part = b'data: {"i": %d}\r\n\r\n' % i
        builder.add(b"%x;n=%d\r\n" % (len(part), i))
        builder.add(part, body=True)
        builder.add(b"\r\n")
    builder.add(b"0\r\nX-Trailer: done\r\n\r\n")
    built = Built(
        raw=bytes(builder.raw),
        body_mask=bytes(builder.mask),
        head_end=head_end,
        close_delimited=False,
        status=200,
        headers={"transfer-encoding": "chunked"},
        keep_alive=True,
    )
    outcome = run(built, [built.raw[i : i + 1] for i in range(len(built.raw))])
    assert outcome.body == built.body
    assert outcome.end_at == len(built.raw)


# --- encode_request --------------------------------------------------------------------------


def test_encode_request_exact_bytes() -> None:
    body = b'{"model":"m"}'
    raw = encode_request(
        "POST",
        "/v1/chat/completions?x=1",
        "api.example.test:8443",
        {"Content-Type": "application/json", "Authorization": "Bearer k"},
        body,
    )
    assert raw == (
        b"POST /v1/chat/completions?x=1 HTTP/1.1\r\n"
        b"Host: api.example.test:8443\r\n"
        b"Content-Length: 13\r\n"
        b"Content-Type: application/json\r\n"
        b"Authorization: Bearer k\r\n"
        b"\r\n"
        b'{"model":"m"}'
    )


def test_encode_request_empty_body_no_headers() -> None:
    assert encode_request("POST", "/", "h", {}, b"") == (
        b"POST / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\n\r\n"
    )


def test_encode_request_round_trips_through_a_request_reader() -> None:
    body = bytes(range(256))
    raw = encode_request("POST", "/p", "h", {"X-A": "1"}, body)
    head, sep, rest = raw.partition(b"\r\n\r\n")
    assert sep
    assert rest == body
    assert b"Content-Length: 256" in head.split(b"\r\n")


@pytest.mark.parametrize(
    "headers",
    [
        {"X-Evil": "a\r\nInjected: 1"},
        {"X-Evil": "a\nInjected: 1"},
        {"X-Evil": "a\rb"},
        {"X-Evil\r\nInjected": "1"},
        {"Authorization": "Bearer k\n"},
    ],
)
def test_encode_request_rejects_line_breaks(headers: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="line break"):
        encode_request("POST", "/", "h", headers, b"")
