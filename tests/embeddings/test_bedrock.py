"""Bedrock InvokeModel embeddings: Titan (one input per call) and Cohere (96 per call)."""

from __future__ import annotations

import json

import pytest

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import BadRequest
from gateway.providers.bedrock.config import BedrockKey
from gateway.providers.bedrock.embeddings import BedrockEmbeddings
from gateway.providers.bedrock.sigv4 import sign
from gateway.providers.embeddings import merge
from gateway.providers.registry import provider_config
from tests.embeddings.calls import NOW
from tests.embeddings.calls import make_call

SIGV4 = BedrockKey(aws_access_key_id=Secret("AKIDEXAMPLE"), aws_secret_access_key=Secret("s3cr3t"))
BEARER = ProviderKey(key=Secret("bedrock-api-key"))
BEDROCK = provider_config(
    name="br", kind="bedrock", region="eu-west-1", base_url="https://br.example", keys=[SIGV4]
)


def test_titan_is_one_signed_call_per_input() -> None:
    call = make_call(
        BEDROCK, "amazon.titan-embed-text-v2:0", ["one", "two", "three"], dimensions=256
    )
    parts = BedrockEmbeddings(BEDROCK).plan(call)
    assert [(p.start, p.count) for p in parts] == [(0, 1), (1, 1), (2, 1)]
    assert [json.loads(p.request.body) for p in parts] == [
        {"inputText": "one", "dimensions": 256},
        {"inputText": "two", "dimensions": 256},
        {"inputText": "three", "dimensions": 256},
    ]
    request = parts[1].request
    assert request.url == "https://br.example/model/amazon.titan-embed-text-v2%3A0/invoke"
    auth = request.headers["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20251130/eu-west-1/bedrock/")
    again = sign(
        "POST",
        request.url,
        {"content-type": "application/json", "accept": "application/json"},
        request.body,
        access_key="AKIDEXAMPLE",
        secret_key="s3cr3t",
        session_token=None,
        region="eu-west-1",
        now=NOW,
    )
    assert again == request.headers


def test_titan_v1_takes_no_dimensions() -> None:
    call = make_call(BEDROCK, "amazon.titan-embed-text-v1", "a", dimensions=256)
    with pytest.raises(BadRequest) as caught:
        BedrockEmbeddings(BEDROCK).plan(call)
    assert caught.value.param == "dimensions"
    plain = make_call(BEDROCK, "amazon.titan-embed-text-v1", "a")
    assert json.loads(BedrockEmbeddings(BEDROCK).plan(plain)[0].request.body) == {"inputText": "a"}


def test_titan_answers_merge_in_order_with_their_token_counts() -> None:
    call = make_call(BEDROCK, "amazon.titan-embed-text-v2:0", ["a", "b"])
    family = BedrockEmbeddings(BEDROCK)
    parts = family.plan(call)
    answers = [
        {"embedding": [0.1], "inputTextTokenCount": 3, "embeddingsByType": {"float": [0.1]}},
        {"embedding": [0.2], "inputTextTokenCount": 4},
    ]
    results = [
        family.parse(call, part, json.dumps(answer).encode(), {})
        for part, answer in zip(parts, answers, strict=True)
    ]
    assert merge(call, parts, results) == ([[0.1], [0.2]], 7)


def test_cohere_batches_of_96_with_input_type() -> None:
    bearer = provider_config(name="b", kind="bedrock", region="us-east-1", keys=[BEARER])
    texts = [f"doc {i}" for i in range(200)]
    body = {"model": "x", "input": texts, "input_type": "search_query"}
    call = make_call(bearer, "cohere.embed-english-v3", texts, body=body)
    parts = BedrockEmbeddings(bearer).plan(call)
    assert [(p.start, p.count) for p in parts] == [(0, 96), (96, 96), (192, 8)]
    request = parts[2].request
    assert request.url == (
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/cohere.embed-english-v3/invoke"
    )
    assert request.headers["authorization"] == "Bearer bedrock-api-key"
    assert json.loads(request.body) == {"texts": texts[192:], "input_type": "search_query"}


def test_cohere_defaults_and_v3_refuses_dimensions() -> None:
    call = make_call(BEDROCK, "cohere.embed-multilingual-v3", "a")
    [part] = BedrockEmbeddings(BEDROCK).plan(call)
    assert json.loads(part.request.body) == {"texts": ["a"], "input_type": "search_document"}
    with pytest.raises(BadRequest) as caught:
        BedrockEmbeddings(BEDROCK).plan(
            make_call(BEDROCK, "cohere.embed-multilingual-v3", "a", dimensions=512)
        )
    assert caught.value.param == "dimensions"
    bad = make_call(BEDROCK, "cohere.embed-multilingual-v3", "a", body={"input_type": 3})
    with pytest.raises(BadRequest) as caught:
        BedrockEmbeddings(BEDROCK).plan(bad)
    assert caught.value.param == "input_type"


def test_cohere_v4_asks_for_floats_and_dimensions() -> None:
    call = make_call(BEDROCK, "us.cohere.embed-v4:0", ["a", "b"], dimensions=512)
    family = BedrockEmbeddings(BEDROCK)
    [part] = family.plan(call)
    assert json.loads(part.request.body) == {
        "texts": ["a", "b"],
        "input_type": "search_document",
        "embedding_types": ["float"],
        "output_dimension": 512,
    }
    answer = {
        "id": "x",
        "response_type": "embeddings_by_type",
        "embeddings": {"float": [[1.0], [2.0]]},
        "texts": ["a", "b"],
        "meta": {"billed_units": {"input_tokens": 6}},
    }
    result = family.parse(call, part, json.dumps(answer).encode(), {})
    assert (result.vectors, result.prompt_tokens) == ([[1.0], [2.0]], 6)


def test_cohere_v3_usage_comes_from_bedrocks_header() -> None:
    call = make_call(BEDROCK, "cohere.embed-english-v3", ["a", "b"])
    family = BedrockEmbeddings(BEDROCK)
    [part] = family.plan(call)
    answer = b'{"id": "x", "response_type": "embeddings_floats", "embeddings": [[1.0], [2.0]]}'
    headers = {"x-amzn-bedrock-input-token-count": "5"}
    assert family.parse(call, part, answer, headers).prompt_tokens == 5
    assert family.parse(call, part, answer, {}).prompt_tokens is None


def test_an_unknown_bedrock_model_is_a_400() -> None:
    call = make_call(BEDROCK, "anthropic.claude-3-haiku", "a")
    with pytest.raises(BadRequest, match="Titan") as caught:
        BedrockEmbeddings(BEDROCK).plan(call)
    assert caught.value.param == "model"
