"""NDJSON decoder: recorded Ollama streams, line ends, blank lines, the bound, split-anywhere."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.errors import FramingError
from gateway.framing.ndjson import NDJSONDecoder
from gateway.framing.registry import make_decoder
from tests.fixtures import FIXTURES

NDJSON_FILES = sorted(p.name for p in FIXTURES.glob("ollama_*.ndjson"))
FIXTURE_BYTES = {name: (FIXTURES / name).read_bytes() for name in NDJSON_FILES}
EXPECTED_LINES = {
    "ollama_chat_tools.ndjson": 3,
    "ollama_chat_tools_docs_example.ndjson": 2,
    "ollama_stream_error.ndjson": 5,
}


def decode(*chunks: bytes, max_line_bytes: int = 8 * 1024 * 1024) -> list[bytes]:
    decoder = NDJSONDecoder(max_line_bytes)
    lines: list[bytes] = []
    for chunk in chunks:
        lines += decoder.feed(chunk)
    return lines + decoder.close()


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def test_the_fixtures_are_all_known() -> None:
    assert set(NDJSON_FILES) == set(EXPECTED_LINES)


@pytest.mark.parametrize("name", NDJSON_FILES)
def test_recorded_streams_give_one_json_document_per_line(name: str) -> None:
    lines = decode(FIXTURE_BYTES[name])
    assert len(lines) == EXPECTED_LINES[name]
    for line in lines:
        assert isinstance(json.loads(line), dict)


@pytest.mark.parametrize("name", NDJSON_FILES)
def test_byte_by_byte_equals_whole(name: str) -> None:
    data = FIXTURE_BYTES[name]
    assert decode(*(data[i : i + 1] for i in range(len(data)))) == decode(data)


@settings(max_examples=200, deadline=None)
@given(
    name=st.sampled_from(NDJSON_FILES),
    cuts=st.lists(st.integers(min_value=0, max_value=4096), max_size=12),
    crlf=st.booleans(),
)
def test_split_anywhere(name: str, cuts: list[int], crlf: bool) -> None:
    data = FIXTURE_BYTES[name]
    if crlf:
        data = data.replace(b"\n", b"\r\n")
    cuts = [c % (len(data) + 1) for c in cuts]
    assert decode(*split_at(data, cuts)) == decode(FIXTURE_BYTES[name])


def test_crlf_and_lf_and_blank_lines() -> None:
    assert decode(b'{"a":1}\r\n\r\n  \n{"b":2}\n\n{"c":3}\r\n') == [
        b'{"a":1}',
        b'{"b":2}',
        b'{"c":3}',
    ]


def test_crlf_cut_between_cr_and_lf() -> None:
    assert decode(b'{"a":1}\r', b'\n{"b":2}\r', b"\n") == [b'{"a":1}', b'{"b":2}']


def test_last_line_without_newline_is_flushed_on_close() -> None:
    decoder = NDJSONDecoder()
    assert decoder.feed(b'{"a":1}\n{"b"') == [b'{"a":1}']
    assert decoder.feed(b":2}") == []
    assert decoder.close() == [b'{"b":2}']
    assert decoder.close() == []  # as new again
    assert decoder.feed(b"{}\n") == [b"{}"]


def test_empty_input() -> None:
    assert decode() == []
    assert decode(b"") == []
    assert decode(b"\n\r\n") == []


def test_line_at_the_bound_is_accepted() -> None:
    assert decode(b"x" * 8 + b"\r\n", max_line_bytes=8) == [b"x" * 8]
    assert decode(b"x" * 4, b"x" * 4 + b"\r", b"\n", max_line_bytes=8) == [b"x" * 8]


@pytest.mark.parametrize(
    "chunks",
    [
        [b"x" * 9 + b"\n"],
        [b"x" * 5, b"x" * 4],
        [b"x" * 9],
        [b"x" * 8 + b"\r", b"y\n"],
        [b"{}\n" + b"x" * 9 + b"\n"],
    ],
)
def test_line_over_the_bound_raises(chunks: list[bytes]) -> None:
    with pytest.raises(FramingError):
        decode(*chunks, max_line_bytes=8)


def test_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        NDJSONDecoder(0)


def test_registry_knows_ndjson() -> None:
    decoder = make_decoder("ndjson")
    assert isinstance(decoder, NDJSONDecoder)
    assert decoder.feed(b"{}\n") == [b"{}"]
