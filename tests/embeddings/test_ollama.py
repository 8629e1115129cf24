"""Ollama `/api/embed`: request and answer."""

from __future__ import annotations

import json

from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.providers.embeddings import merge
from gateway.providers.ollama.embeddings import OllamaEmbeddings
from gateway.providers.registry import provider_config
from tests.embeddings.calls import make_call


def test_one_call_with_every_input_and_dimensions() -> None:
    provider = provider_config(name="ol", kind="ollama", base_url="http://ol:11434/")
    call = make_call(provider, "all-minilm", ["a", "b"], dimensions=64)
    [part] = OllamaEmbeddings(provider).plan(call)
    assert part.request.url == "http://ol:11434/api/embed"
    assert part.request.headers == {"Content-Type": "application/json"}
    assert json.loads(part.request.body) == {
        "model": "all-minilm",
        "input": ["a", "b"],
        "dimensions": 64,
    }
    answer = {
        "model": "all-minilm",
        "embeddings": [[0.1, 0.2], [0.3, 0.4]],
        "total_duration": 14143917,
        "load_duration": 1019500,
        "prompt_eval_count": 8,
    }
    family = OllamaEmbeddings(provider)
    results = [family.parse(call, part, json.dumps(answer).encode(), {})]
    assert merge(call, [part], results) == ([[0.1, 0.2], [0.3, 0.4]], 8)


def test_a_key_is_a_bearer_and_no_dimensions_sends_none() -> None:
    provider = provider_config(
        name="ol", kind="ollama", base_url="https://ollama.com", keys=[ProviderKey(key=Secret("k"))]
    )
    [part] = OllamaEmbeddings(provider).plan(make_call(provider, "m", "hi"))
    assert part.request.headers["Authorization"] == "Bearer k"
    assert json.loads(part.request.body) == {"model": "m", "input": ["hi"]}
