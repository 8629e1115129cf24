"""Semantic mode against a real gateway: a question asked in other words is answered from
the stored answer (x-gateway-cache-similarity), never across keys, system prompts, tools or
parameters; the index lives with the sqlite entries (a restarted gateway finds them); an
embeddings upstream that fails makes a miss, not an error; the embedding is paid by the
gateway, in /admin/spend."""

from __future__ import annotations

import json
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.cache.clients import upstream_calls
from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.redis_server import RedisServer
from tests.redis_server import redis_server
from tests.upstreams.openai_upstream import FakeOpenAI
from tests.upstreams.words_embeddings import WordsEmbeddings
from tests.upstreams.words_embeddings import cosine

__all__ = ["redis_server"]
pytestmark = pytest.mark.e2e

MASTER = "sk-master-semantic"


def semantic_config(
    upstream: FakeOpenAI, words: WordsEmbeddings, db: Path, redis_url: str | None = None
) -> str:
    store = "" if redis_url is None else f', store: redis, url: "{redis_url}"'
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: "sqlite:///{db}"}}
cache: {{mode: semantic, semantic: {{embedding_model: words, threshold: 0.9}}{store}}}
routing: {{cooldown_s: 0.001, auth_hold_s: 0.001, circuit_failures: 1000}}
keys:
  - {{name: alice, key: sk-alice-1}}
  - {{name: bob, key: sk-bob-1}}
providers:
  - {{name: up, kind: openai, base_url: "{upstream.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  - {{name: emb, kind: openai, base_url: "{words.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
models:
  - name: text
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 1000, output_per_mtok: 2000}}
  - name: words
    targets: [{{provider: emb, model: words-1}}]
    price: {{input_per_mtok: 100, output_per_mtok: 0}}
  - name: exact-only
    targets: [{{provider: up, model: text}}]
    cache: {{mode: exact}}
"""


@pytest.fixture(scope="module")
def words() -> Iterator[WordsEmbeddings]:
    fake = WordsEmbeddings().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("semantic-db") / "gw.db"


@pytest.fixture(scope="module")
def gw(
    upstream: FakeOpenAI, words: WordsEmbeddings, db: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    config = semantic_config(upstream, words, db)
    gateway = start_gateway(config, tmp_path_factory.mktemp("semantic-gw"))
    yield gateway
    stop_gateway(gateway)


def ask(
    gw: Gateway,
    text: str,
    *,
    key: str = "sk-alice-1",
    model: str = "text",
    system: str | None = None,
    **extra: Any,
) -> tuple[dict[str, str], str]:
    with openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0, timeout=30) as client:
        messages: list[Any] = [{"role": "user", "content": text}]
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=messages, **extra
        )
        return dict(raw.headers), raw.parse().choices[0].message.content or ""


def test_the_same_question_in_other_words_is_a_hit(gw: Gateway, upstream: FakeOpenAI) -> None:
    tag = uuid.uuid4().hex
    first = f"What is the weather in Paris today {tag}?"
    again = f"what is the WEATHER in paris, today {tag}"
    assert cosine(first, again) == pytest.approx(1.0)
    headers, answer = ask(gw, first, system=tag)
    assert headers["x-gateway-cache"] == "miss"
    headers, replayed = ask(gw, again, system=tag)
    assert headers["x-gateway-cache"] == "hit"
    assert float(headers["x-gateway-cache-similarity"]) >= 0.9
    assert replayed == answer
    assert upstream_calls(upstream, tag) == 1


def test_a_different_question_is_a_miss(gw: Gateway, upstream: FakeOpenAI) -> None:
    tag = uuid.uuid4().hex
    ask(gw, f"What is the weather in Paris {tag}?", system=tag)
    other = f"Tell me a joke about cats {tag}"
    assert cosine(f"What is the weather in Paris {tag}?", other) < 0.9
    headers, _ = ask(gw, other, system=tag)
    assert headers["x-gateway-cache"] == "miss"
    assert "x-gateway-cache-similarity" not in headers
    assert upstream_calls(upstream, tag) == 2


@pytest.mark.parametrize(
    "change",
    [
        {"key": "sk-bob-1"},  # another key's namespace
        {"system": "You answer in French."},  # another system prompt
        {"temperature": 0.2},
        {"max_tokens": 7},
        {"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]},
        {"model": "exact-only"},  # a model whose cache is exact
    ],
)
def test_never_a_semantic_hit_across_what_must_match(
    gw: Gateway, upstream: FakeOpenAI, change: dict[str, Any]
) -> None:
    tag = uuid.uuid4().hex
    base: dict[str, Any] = {"system": f"You are terse. {tag}"}  # this test's own bucket
    ask(gw, f"Is it raining in Rome {tag}?", **base)
    headers, _ = ask(gw, f"is it RAINING in rome {tag}", **(base | change))
    assert headers["x-gateway-cache"] == "miss"
    assert upstream_calls(upstream, tag) == 2


def test_a_failing_embeddings_upstream_is_a_miss_not_an_error(
    gw: Gateway, upstream: FakeOpenAI, words: WordsEmbeddings
) -> None:
    tag = uuid.uuid4().hex
    words.down = True
    try:
        headers, _ = ask(gw, f"How tall is the Eiffel tower {tag}?", system=tag)
        assert headers["x-gateway-cache"] == "miss"
        headers, _ = ask(gw, f"How tall is the Eiffel tower {tag}?", system=tag)
        assert headers["x-gateway-cache"] == "hit"  # the exact entry still answers
        headers, _ = ask(gw, f"how TALL is the eiffel tower {tag}", system=tag)
        assert headers["x-gateway-cache"] == "miss"  # no vector was kept for it
    finally:
        words.down = False
    assert upstream_calls(upstream, tag) == 2


def admin(gw: Gateway, path: str) -> Any:
    request = urllib.request.Request(gw.url + path, headers={"Authorization": f"Bearer {MASTER}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def test_the_gateway_pays_for_the_embeddings(gw: Gateway, words: WordsEmbeddings) -> None:
    before = len(words.inputs)
    tag = uuid.uuid4().hex
    ask(gw, f"Where is the Louvre {tag}?", system=tag)
    assert len(words.inputs) == before + 1
    assert words.inputs[-1] == f"Where is the Louvre {tag}?"  # the last user turn only
    spend = admin(gw, "/admin/spend")
    row = next(m for m in spend["models"] if m["model"] == "words")
    assert row["requests"] >= 1
    assert row["spend_nanos"] > 0
    gateway_row = next(k for k in spend["keys"] if k["key_id"] is None)
    assert gateway_row["spend_nanos"] >= row["spend_nanos"]


def test_a_restarted_gateway_finds_the_stored_questions(
    upstream: FakeOpenAI, words: WordsEmbeddings, tmp_path: Path
) -> None:
    db = tmp_path / "gw.db"
    config = semantic_config(upstream, words, db)
    tag = uuid.uuid4().hex
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
    first = start_gateway(config, tmp_path / "one")
    try:
        ask(first, f"Which river crosses Paris {tag}?", system=tag)
    finally:
        stop_gateway(first)
    second = start_gateway(config, tmp_path / "two")
    try:
        headers, _ = ask(second, f"which RIVER crosses paris {tag}", system=tag)
    finally:
        stop_gateway(second)
    assert headers["x-gateway-cache"] == "hit"
    assert upstream_calls(upstream, tag) == 1


def test_a_semantic_hit_streams_like_any_answer(gw: Gateway, upstream: FakeOpenAI) -> None:
    tag = uuid.uuid4().hex
    _, answer = ask(gw, f"Name a French cheese {tag}", system=tag)
    with openai.OpenAI(base_url=gw.v1, api_key="sk-alice-1", max_retries=0, timeout=30) as client:
        raw = client.chat.completions.with_raw_response.create(
            model="text",
            messages=[
                {"role": "system", "content": tag},
                {"role": "user", "content": f"name a FRENCH cheese! {tag}"},
            ],
            stream=True,
        )
        assert raw.headers["x-gateway-cache"] == "hit"
        assert "x-gateway-cache-similarity" in raw.headers
        chunks = list(raw.parse())
        assert len(chunks) >= 2
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text == answer
        assert upstream_calls(upstream, tag) == 1


def test_replicas_share_one_redis_index(
    upstream: FakeOpenAI, words: WordsEmbeddings, redis_server: RedisServer, tmp_path: Path
) -> None:
    """Two gateways (each its own sqlite accounting) with the cache in one redis: a question
    the first answered is a semantic hit on the second."""
    tag = uuid.uuid4().hex
    gateways = []
    try:
        for name in ("one", "two"):
            (tmp_path / name).mkdir()
            config = semantic_config(upstream, words, tmp_path / name / "gw.db", redis_server.url())
            gateways.append(start_gateway(config, tmp_path / name))
        ask(gateways[0], f"What is the capital of Peru {tag}?", system=tag)
        headers, _ = ask(gateways[1], f"what is the CAPITAL of peru {tag}", system=tag)
    finally:
        for gw in gateways:
            stop_gateway(gw)
    assert headers["x-gateway-cache"] == "hit"
    assert float(headers["x-gateway-cache-similarity"]) >= 0.9
    assert upstream_calls(upstream, tag) == 1
