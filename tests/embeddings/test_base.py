"""The shared part: input checks, base64 exactness, batching, merging in input order."""

from __future__ import annotations

import base64
import random
import struct
import sys
from array import array
from typing import Any

import msgspec
import pytest

from gateway.errors import BadRequest
from gateway.errors import UpstreamProtocolError
from gateway.providers.base import UpstreamRequest
from gateway.providers.embeddings import Inputs
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import batches
from gateway.providers.embeddings import estimate_tokens
from gateway.providers.embeddings import float32_base64
from gateway.providers.embeddings import floats_of_base64
from gateway.providers.embeddings import merge
from gateway.providers.embeddings import parse_input
from gateway.providers.embeddings import render
from gateway.providers.registry import embeddings_provider
from gateway.providers.registry import provider_config
from tests.embeddings.calls import make_call

MOCK = provider_config(name="m", kind="mock")


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("hello", Inputs(texts=["hello"])),
        (["a", "b c"], Inputs(texts=["a", "b c"])),
        ([1, 2, 3], Inputs(tokens=[[1, 2, 3]])),
        ([[1, 2], [0]], Inputs(tokens=[[1, 2], [0]])),
        (" ", Inputs(texts=[" "])),  # whitespace is text, as OpenAI takes it
    ],
)
def test_valid_inputs(value: Any, expected: Inputs) -> None:
    assert parse_input(value) == expected


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("", "empty string"),
        ([], "empty list"),
        (["a", ""], "'input[1]' cannot be an empty string"),
        ([[1], []], "'input[1]' must be a non-empty list"),
        ([1, -2], "not a mix"),
        ([1, True], "not a mix"),
        (["a", 1], "not a mix"),
        ([[1], "a"], "not a mix"),
        ([[1, "2"]], "'input[0]' must be"),
        ({"text": "a"}, "must be a string"),
        (None, "must be a string"),
        (3, "must be a string"),
        (["x"] * 2049, "more than 2048"),
    ],
)
def test_bad_inputs_are_400_naming_input(value: Any, words: str) -> None:
    with pytest.raises(BadRequest) as caught:
        parse_input(value)
    assert caught.value.param == "input"
    assert caught.value.status == 400
    assert words in caught.value.message


def test_base64_decodes_to_the_same_float32_values() -> None:
    rng = random.Random(7)
    vector = [rng.uniform(-1, 1) for _ in range(257)] + [0.0, -0.0, 1e-38, 3.4e38, -1.5]
    encoded = float32_base64(vector)
    raw = base64.b64decode(encoded)
    assert len(raw) == 4 * len(vector)
    decoded = array("f")
    decoded.frombytes(raw)
    if sys.byteorder == "big":
        decoded.byteswap()
    as_float32 = [struct.unpack("<f", struct.pack("<f", v))[0] for v in vector]
    assert list(decoded) == as_float32
    assert floats_of_base64(encoded) == as_float32
    # a value that is float32 already goes through unchanged
    assert floats_of_base64(float32_base64(as_float32)) == as_float32


def test_base64_rejects_what_float32_cannot_hold() -> None:
    with pytest.raises(UpstreamProtocolError):
        float32_base64([1e39])
    with pytest.raises(UpstreamProtocolError):
        floats_of_base64("not base64!")
    with pytest.raises(UpstreamProtocolError):
        floats_of_base64(base64.b64encode(b"abc").decode())


def test_batches_cover_every_item_in_order() -> None:
    assert batches(250, 100) == [(0, 100), (100, 100), (200, 50)]
    assert batches(3, 1) == [(0, 1), (1, 1), (2, 1)]
    assert batches(96, 96) == [(0, 96)]


def _part(start: int, count: int) -> Part:
    return Part(request=UpstreamRequest(url="x"), start=start, count=count)


def test_merge_keeps_input_order_and_sums_or_estimates_usage() -> None:
    call = make_call(MOCK, "m", ["aaaa", "bbbbbbbb", "c"])
    parts = [_part(0, 2), _part(2, 1)]
    results = [
        PartResult(vectors=[[1.0], [2.0]], prompt_tokens=5),
        PartResult(vectors=[[3.0]], prompt_tokens=None),  # estimated: "c" is one token
    ]
    assert merge(call, parts, results) == ([[1.0], [2.0], [3.0]], 6)
    assert estimate_tokens(["aaaa", "bbbbbbbb", "c"]) == 1 + 2 + 1


def test_merge_counts_token_ids_when_the_upstream_did_not() -> None:
    call = make_call(MOCK, "m", [[1, 2, 3], [4]])
    result = PartResult(vectors=[[1.0], [2.0]], prompt_tokens=None)
    assert merge(call, [_part(0, 2)], [result]) == ([[1.0], [2.0]], 4)


def test_merge_refuses_a_part_with_the_wrong_number_of_vectors() -> None:
    call = make_call(MOCK, "m", ["a", "b"])
    with pytest.raises(UpstreamProtocolError, match="1 embeddings for 2 inputs"):
        merge(call, [_part(0, 2)], [PartResult(vectors=[[1.0]], prompt_tokens=1)])


def test_render_is_the_openai_shape() -> None:
    out = msgspec.json.decode(render([[0.5, -1.0], [0.25, 2.0]], "client-model", 7, False))
    assert out == {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 0, "embedding": [0.5, -1.0]},
            {"object": "embedding", "index": 1, "embedding": [0.25, 2.0]},
        ],
        "model": "client-model",
        "usage": {"prompt_tokens": 7, "total_tokens": 7},
    }
    b64 = msgspec.json.decode(render([[0.5, -1.0]], "m", 1, True))
    assert b64["data"][0]["embedding"] == base64.b64encode(struct.pack("<2f", 0.5, -1.0)).decode()


def test_a_kind_without_embeddings_is_a_400() -> None:
    with pytest.raises(BadRequest, match="no embeddings API") as caught:
        embeddings_provider(provider_config(name="claude", kind="anthropic"))
    assert caught.value.param == "model"


def test_token_ids_to_a_text_only_provider_are_a_400() -> None:
    gemini = provider_config(name="g", kind="gemini", base_url="http://g")
    call = make_call(gemini, "text-embedding-004", [[1, 2]])
    with pytest.raises(BadRequest, match="embeds text only") as caught:
        embeddings_provider(gemini).plan(call)
    assert caught.value.param == "input"
