"""Fuzz targets for the byte decoders: SSE, NDJSON, AWS event-stream, the HTTP/1.1 response
parser. Each is fed its input cut into reads (see `contract.pieces`) and must:

- raise nothing but its framing error (`FramingError`, `UpstreamProtocolError` for HTTP);
- never hold more than its documented bound between two reads;
- give the same output (or the same error) as when fed the whole input at once.
"""

from __future__ import annotations

from typing import Any

from gateway.errors import FramingError
from gateway.errors import UpstreamProtocolError
from gateway.framing.aws_eventstream import EventStreamDecoder
from gateway.framing.http1 import MAX_HEAD_BYTES
from gateway.framing.http1 import ResponseHead
from gateway.framing.http1 import ResponseParser
from gateway.framing.ndjson import NDJSONDecoder
from gateway.framing.sse import SSEDecoder
from tests.fuzz.contract import check
from tests.fuzz.contract import pieces
from tests.fuzz.contract import split

# Small bounds, so that the fuzzers reach them.
SSE_BOUND = 4096
NDJSON_BOUND = 4096
AWS_PAYLOAD_BOUND = 4096
AWS_HEADERS_BOUND = 1024
AWS_FRAME_BOUND = 16 + AWS_HEADERS_BOUND + AWS_PAYLOAD_BOUND


def _whole(make: Any, payload: bytes) -> list[Any] | None:
    """The output of a new decoder fed `payload` in one read; None for a FramingError."""
    decoder = make()
    try:
        return list(decoder.feed(payload)) + list(decoder.close())
    except FramingError:
        return None


def _decoded(decoder: Any, payload: bytes, cut: int, buffered: Any, bound: int) -> list[Any] | None:
    out: list[Any] = []
    try:
        for piece in pieces(payload, cut):
            out += decoder.feed(piece)
            check(buffered(decoder) <= bound, f"{buffered(decoder)} bytes held, bound {bound}")
        out += decoder.close()
    except FramingError:
        return None
    return out


def sse(data: bytes) -> None:
    cut, payload = split(data)
    decoder = SSEDecoder(max_event_bytes=SSE_BOUND)
    got = _decoded(decoder, payload, cut, lambda d: d._tail_len + d._data_len, SSE_BOUND)
    check(got == _whole(lambda: SSEDecoder(max_event_bytes=SSE_BOUND), payload), "cut-dependent")
    for event in got or ():
        check(len(event.data) <= SSE_BOUND, "an event over the bound")


def ndjson(data: bytes) -> None:
    cut, payload = split(data)
    decoder = NDJSONDecoder(max_line_bytes=NDJSON_BOUND)
    # the held bytes may end with the CR of a CRLF: one byte over the bound
    got = _decoded(decoder, payload, cut, lambda d: d._tail_len, NDJSON_BOUND + 1)
    check(got == _whole(lambda: NDJSONDecoder(max_line_bytes=NDJSON_BOUND), payload), "cut-dep.")
    for line in got or ():
        check(0 < len(line) <= NDJSON_BOUND and b"\n" not in line, f"a bad line {line[:80]!r}")


def _aws() -> EventStreamDecoder:
    return EventStreamDecoder(
        max_payload_bytes=AWS_PAYLOAD_BOUND, max_headers_bytes=AWS_HEADERS_BOUND
    )


def aws_eventstream(data: bytes) -> None:
    cut, payload = split(data)
    got = _decoded(_aws(), payload, cut, lambda d: len(d._buf), AWS_FRAME_BOUND)
    check(got == _whole(_aws, payload), "cut-dependent output")
    for message in got or ():
        check(len(message.payload) <= AWS_PAYLOAD_BOUND, "a payload over the bound")
        for name, value in message.headers.items():
            check(isinstance(name, str), "a header name that is not text")
            check(isinstance(value, bool | int | bytes | str), f"header value {value!r}")


def _http_events(payload: bytes, cut: int) -> tuple[list[Any], bool] | None:
    """(events, ended) of a response parser, checking the head buffer bound after each read;
    None on UpstreamProtocolError."""
    parser = ResponseParser()
    events: list[Any] = []
    try:
        for piece in pieces(payload, cut):
            events += parser.feed(piece)
            check(len(parser._buffer) <= MAX_HEAD_BYTES, f"{len(parser._buffer)} bytes held")
        events += parser.close()
    except UpstreamProtocolError:
        return None
    return events, parser.done


def _normal(events: list[Any]) -> list[Any]:
    """Body bytes joined: a cut-independent view of the parser's events."""
    out: list[Any] = []
    for event in events:
        if isinstance(event, bytes):
            if out and isinstance(out[-1], bytes):
                out[-1] += event
            elif event:
                out.append(event)
        else:
            out.append(event)
    return out


def http1(data: bytes) -> None:
    cut, payload = split(data)
    got = _http_events(payload, cut)
    whole = _http_events(payload, 0)
    check((got is None) == (whole is None), "an error that depends on the cuts")
    if got is None or whole is None:
        return
    check(_normal(got[0]) == _normal(whole[0]), "cut-dependent events")
    heads = [e for e in got[0] if isinstance(e, ResponseHead)]
    check(len(heads) <= 1, "two response heads")
    for head in heads:
        check(not 100 <= head.status < 200, f"an interim head {head.status} given as the answer")
