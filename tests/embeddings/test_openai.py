"""OpenAI, Azure and the mock: requests built and answers parsed."""

from __future__ import annotations

import base64
import json
import math
import struct

import pytest

from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import BadRequest
from gateway.errors import UpstreamProtocolError
from gateway.providers.azure.embeddings import AzureEmbeddings
from gateway.providers.embeddings import merge
from gateway.providers.mock.embeddings import MockEmbeddings
from gateway.providers.mock.embeddings import mock_vector
from gateway.providers.mock.embeddings import seed_of
from gateway.providers.openai.embeddings import OpenAIEmbeddings
from gateway.providers.registry import provider_config
from tests.embeddings.calls import make_call

KEY = ProviderKey(key=Secret("sk-up"))
OPENAI = provider_config(name="oa", kind="openai", base_url="https://api.example/v1/", keys=[KEY])


def test_openai_request_forwards_the_client_body_with_the_upstream_model() -> None:
    body = {
        "model": "smart-embed",
        "input": [[1, 2], [3]],
        "encoding_format": "base64",
        "dimensions": 256,
        "user": "",
        "x-extra": None,
    }
    call = make_call(OPENAI, "text-embedding-3-small", [[1, 2], [3]], body=body, dimensions=256)
    [part] = OpenAIEmbeddings(OPENAI).plan(call)
    assert (part.start, part.count) == (0, 2)
    assert part.request.url == "https://api.example/v1/embeddings"
    assert part.request.headers == {
        "Content-Type": "application/json",
        "Authorization": "Bearer sk-up",
    }
    assert json.loads(part.request.body) == {**body, "model": "text-embedding-3-small"}
    assert body["model"] == "smart-embed"  # the client's dict is not changed


def test_openai_answer_is_placed_by_index_and_base64_is_decoded() -> None:
    call = make_call(OPENAI, "m", ["a", "b", "c"])
    packed = base64.b64encode(struct.pack("<2f", 0.5, -0.25)).decode()
    answer = {
        "object": "list",
        "data": [
            {"object": "embedding", "index": 2, "embedding": [3.0, 3.5]},
            {"object": "embedding", "index": 0, "embedding": packed},
            {"object": "embedding", "index": 1, "embedding": [2.0, 2.5]},
        ],
        "model": "m",
        "usage": {"prompt_tokens": 9, "total_tokens": 9},
    }
    family = OpenAIEmbeddings(OPENAI)
    [part] = family.plan(call)
    result = family.parse(call, part, json.dumps(answer).encode(), {})
    assert result.vectors == [[0.5, -0.25], [2.0, 2.5], [3.0, 3.5]]
    assert result.prompt_tokens == 9


@pytest.mark.parametrize(
    "data",
    [
        [{"index": 0, "embedding": [1.0]}, {"index": 0, "embedding": [2.0]}],
        [{"index": 5, "embedding": [1.0]}],
    ],
)
def test_openai_answer_with_misplaced_indexes_is_a_protocol_error(data: list[object]) -> None:
    call = make_call(OPENAI, "m", ["a", "b"])
    with pytest.raises(UpstreamProtocolError, match="index"):
        OpenAIEmbeddings(OPENAI).parse(
            call, OpenAIEmbeddings(OPENAI).plan(call)[0], json.dumps({"data": data}).encode(), {}
        )


def test_openai_answer_that_is_not_json_is_a_protocol_error() -> None:
    call = make_call(OPENAI, "m", "a")
    family = OpenAIEmbeddings(OPENAI)
    with pytest.raises(UpstreamProtocolError):
        family.parse(call, family.plan(call)[0], b"<html>", {})


def _azure(base: str, version: str | None) -> ProviderConfig:
    return provider_config(name="az", kind="azure", base_url=base, api_version=version, keys=[KEY])


@pytest.mark.parametrize(
    ("base", "version", "url"),
    [
        (
            "https://r.openai.azure.com",
            "2024-10-21",
            "https://r.openai.azure.com/openai/deployments/my%20dep/embeddings"
            "?api-version=2024-10-21",
        ),
        (
            "https://r.openai.azure.com/openai",
            "v1",
            "https://r.openai.azure.com/openai/v1/embeddings",
        ),
        (
            "https://r.openai.azure.com/openai/v1",
            "preview",
            "https://r.openai.azure.com/openai/v1/embeddings?api-version=preview",
        ),
    ],
)
def test_azure_urls_and_api_key_header(base: str, version: str, url: str) -> None:
    provider = _azure(base, version)
    call = make_call(provider, "my dep", "hello")
    [part] = AzureEmbeddings(provider).plan(call)
    assert part.request.url == url
    assert part.request.headers == {"Content-Type": "application/json", "api-key": "sk-up"}
    assert json.loads(part.request.body)["model"] == "my dep"


MOCK = provider_config(name="mock", kind="mock")


def _mock_answer(value: object, dimensions: int | None = None) -> tuple[list[list[float]], int]:
    call = make_call(MOCK, "mock", value, dimensions=dimensions)
    family = MockEmbeddings(MOCK)
    parts = family.plan(call)
    results = [family.parse(call, p, b"".join(p.request.playback or []), {}) for p in parts]
    return merge(call, parts, results)


def test_mock_vectors_are_deterministic_unit_float32_vectors() -> None:
    vectors, tokens = _mock_answer(["hello", "world", "hello"])
    assert vectors[0] == vectors[2] != vectors[1]
    assert all(len(v) == 16 for v in vectors)
    assert all(math.isclose(sum(x * x for x in v), 1.0, rel_tol=1e-6) for v in vectors)
    for v in vectors:
        assert list(struct.unpack("<16f", struct.pack("<16f", *v))) == v
    assert vectors[1] == mock_vector(seed_of("world"), 16)
    assert tokens == 6  # two per five-character word


def test_mock_takes_dimensions_and_token_ids() -> None:
    vectors, tokens = _mock_answer([[1, 2, 3], [4]], dimensions=5)
    assert [len(v) for v in vectors] == [5, 5]
    assert vectors[0] != vectors[1]
    assert tokens == 4
    with pytest.raises(BadRequest) as caught:
        _mock_answer("a", dimensions=5000)
    assert caught.value.param == "dimensions"
