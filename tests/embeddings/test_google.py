"""Gemini API `batchEmbedContents` and Vertex AI `:predict`: requests and answers."""

from __future__ import annotations

import json

import pytest

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamProtocolError
from gateway.providers.embeddings import merge
from gateway.providers.gemini.embeddings import GeminiEmbeddings
from gateway.providers.registry import provider_config
from gateway.providers.vertex.config import VertexKey
from gateway.providers.vertex.embeddings import VertexAIEmbeddings
from tests.embeddings.calls import make_call

GEMINI = provider_config(
    name="g", kind="gemini", base_url="https://gl.example", keys=[ProviderKey(key=Secret("AIza"))]
)
VERTEX = provider_config(
    name="v",
    kind="vertex",
    base_url="https://europe-west4-aiplatform.googleapis.com",
    project="proj",
    region="europe-west4",
    keys=[VertexKey(credentials_file="/sa.json")],
)


def test_gemini_batches_of_100_in_order() -> None:
    texts = [f"text {i}" for i in range(250)]
    call = make_call(GEMINI, "gemini-embedding-001", texts, dimensions=768)
    parts = GeminiEmbeddings(GEMINI).plan(call)
    assert [(p.start, p.count) for p in parts] == [(0, 100), (100, 100), (200, 50)]
    first = parts[0].request
    assert first.url == "https://gl.example/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert first.headers == {"Content-Type": "application/json", "x-goog-api-key": "AIza"}
    body = json.loads(first.body)
    assert body["requests"][0] == {
        "model": "models/gemini-embedding-001",
        "content": {"parts": [{"text": "text 0"}]},
        "outputDimensionality": 768,
    }
    sent = [
        r["content"]["parts"][0]["text"]
        for p in parts
        for r in json.loads(p.request.body)["requests"]
    ]
    assert sent == texts


def test_gemini_without_dimensions_sends_none_and_accepts_models_prefix() -> None:
    call = make_call(GEMINI, "models/text-embedding-004", "hi")
    [part] = GeminiEmbeddings(GEMINI).plan(call)
    assert part.request.url.endswith("/v1beta/models/text-embedding-004:batchEmbedContents")
    assert json.loads(part.request.body) == {
        "requests": [{"model": "models/text-embedding-004", "content": {"parts": [{"text": "hi"}]}}]
    }


def test_gemini_answer_merges_with_estimated_usage() -> None:
    call = make_call(GEMINI, "gemini-embedding-001", ["abcdefgh", "xyz"])
    family = GeminiEmbeddings(GEMINI)
    parts = family.plan(call)
    answer = b'{"embeddings": [{"values": [0.1, 0.2]}, {"values": [0.3, 0.4]}]}'
    results = [family.parse(call, parts[0], answer, {})]
    assert merge(call, parts, results) == ([[0.1, 0.2], [0.3, 0.4]], 3)


def test_gemini_answer_missing_a_vector_is_a_protocol_error() -> None:
    call = make_call(GEMINI, "gemini-embedding-001", ["a", "b"])
    family = GeminiEmbeddings(GEMINI)
    parts = family.plan(call)
    results = [family.parse(call, parts[0], b'{"embeddings": [{"values": [1.0]}]}', {})]
    with pytest.raises(UpstreamProtocolError):
        merge(call, parts, results)


@pytest.mark.parametrize(
    ("model", "sizes"),
    [("text-embedding-005", [250, 50]), ("gemini-embedding-001", [1] * 300)],
)
def test_vertex_predict_batch_sizes(model: str, sizes: list[int]) -> None:
    texts = [f"t{i}" for i in range(300)]
    call = make_call(VERTEX, model, texts, access_token="ya29.tok")
    parts = VertexAIEmbeddings(VERTEX).plan(call)
    assert [p.count for p in parts] == sizes
    assert [p.start for p in parts] == [sum(sizes[:i]) for i in range(len(sizes))]
    request = parts[0].request
    assert request.url == (
        "https://europe-west4-aiplatform.googleapis.com/v1/projects/proj/locations/"
        f"europe-west4/publishers/google/models/{model}:predict"
    )
    assert request.headers == {
        "Content-Type": "application/json",
        "Authorization": "Bearer ya29.tok",
    }
    assert json.loads(request.body)["instances"][0] == {"content": "t0"}
    assert "parameters" not in json.loads(request.body)


def test_vertex_dimensions_and_usage_from_token_counts() -> None:
    call = make_call(VERTEX, "text-embedding-005", ["a b", "c"], dimensions=256, access_token="t")
    family = VertexAIEmbeddings(VERTEX)
    [part] = family.plan(call)
    assert json.loads(part.request.body)["parameters"] == {"outputDimensionality": 256}
    answer = {
        "predictions": [
            {"embeddings": {"statistics": {"truncated": False, "token_count": 2}, "values": [1.0]}},
            {
                "embeddings": {
                    "statistics": {"truncated": False, "token_count": 1.0},
                    "values": [2.0],
                }
            },
        ],
        "metadata": {"billableCharacterCount": 3},
    }
    result = family.parse(call, part, json.dumps(answer).encode(), {})
    assert (result.vectors, result.prompt_tokens) == ([[1.0], [2.0]], 3)
    answer["predictions"][1]["embeddings"].pop("statistics")  # type: ignore[index]
    assert family.parse(call, part, json.dumps(answer).encode(), {}).prompt_tokens is None


def test_vertex_needs_its_token() -> None:
    call = make_call(VERTEX, "text-embedding-005", "a")
    with pytest.raises(UpstreamConnectError):
        VertexAIEmbeddings(VERTEX).plan(call)
