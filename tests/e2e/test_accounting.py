"""Accounting through a real gateway process: the cost of every answer equals the price
arithmetic on the usage the upstream reported, for the openai, anthropic, gemini and ollama
fake upstreams, streaming and not; embeddings are costed too; spend per model adds up; and
no secret ever reaches the log or an answer after the key's creation."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.embeddings_upstream import FakeEmbeddings
from tests.upstreams.gemini_upstream import FakeGemini
from tests.upstreams.ollama_upstream import FakeOllama
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = "sk-master-e2e-acct-7f3a"
UPSTREAM_KEYS = ["sk-up-openai-91b2", "sk-up-anthropic-c4d5", "gm-up-gemini-e6f7"]
# USD per million tokens (the config's overrides), microdollars per token
IN, CACHED, OUT = Decimal("3"), Decimal("0.3"), Decimal("15")
EMBED_IN = Decimal("0.02")
MODELS = ["oa", "an", "ge", "ol"]


@pytest.fixture(scope="module")
def gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    fakes = [FakeOpenAI(), FakeAnthropic(), FakeGemini(), FakeOllama(), FakeEmbeddings()]
    for fake in fakes:
        fake.start()
    oa, an, ge, ol, emb = fakes
    up_key, claude_key, gemini_key = UPSTREAM_KEYS
    price = "{input_per_mtok: 3, output_per_mtok: 15, cached_input_per_mtok: 0.3}"
    config = f"""
auth: {{master_key: {MASTER}}}
store: {{url: "sqlite:///{tmp_path_factory.mktemp("db")}/gw.db"}}
providers:
  - {{name: up, kind: openai, base_url: "{oa.base_url}", keys: [{{key: {up_key}}}]}}
  - {{name: claude, kind: anthropic, base_url: "{an.base_url}", keys: [{{key: {claude_key}}}]}}
  - {{name: gem, kind: gemini, base_url: "{ge.base_url}", keys: [{{key: {gemini_key}}}]}}
  - {{name: ol, kind: ollama, base_url: "{ol.base_url}"}}
  - {{name: embed, kind: openai, base_url: "{emb.base_url}/v1", keys: [{{key: k}}]}}
models:
  - {{name: oa, targets: [{{provider: up, model: text}}], price: {price}}}
  - {{name: an, targets: [{{provider: claude, model: text}}], price: {price}}}
  - {{name: ge, targets: [{{provider: gem, model: text}}], price: {price}}}
  - {{name: ol, targets: [{{provider: ol, model: text}}], price: {price}}}
  - name: emb
    targets: [{{provider: embed, model: text-embedding-3-small}}]
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-acct"))
    yield gateway
    stop_gateway(gateway)
    for fake in fakes:
        fake.stop()


def client(gw: Gateway, key: str = MASTER) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0, timeout=20)


def expected_usd(usage: Any) -> Decimal:
    """The price arithmetic on a chat usage object, done here."""
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    micro = (usage.prompt_tokens - cached) * IN + cached * CACHED + usage.completion_tokens * OUT
    return micro / Decimal(10**6)


def admin(gw: Gateway, path: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gw.url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {MASTER}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


HI: list[Any] = [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize("model", MODELS)
def test_non_streaming_cost_header(gw: Gateway, model: str) -> None:
    with client(gw) as c:
        raw = c.chat.completions.with_raw_response.create(model=model, messages=HI)
    usage = raw.parse().usage
    assert usage is not None
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    cost = Decimal(raw.headers["x-gateway-cost-usd"])
    assert cost > 0
    assert cost == expected_usd(usage)


@pytest.mark.parametrize("model", MODELS)
def test_streaming_usage_chunk_cost(gw: Gateway, model: str) -> None:
    with client(gw) as c:
        chunks = list(
            c.chat.completions.create(
                model=model, messages=HI, stream=True, stream_options={"include_usage": True}
            )
        )
    usage = chunks[-1].usage
    assert usage is not None
    extra = usage.model_extra or {}
    assert Decimal(str(extra["cost_usd"])) == expected_usd(usage) > 0


def test_embeddings_are_costed(gw: Gateway) -> None:
    with client(gw) as c:
        raw = c.embeddings.with_raw_response.create(model="emb", input=["one two", "three"])
    tokens = raw.parse().usage.prompt_tokens
    assert tokens > 0
    assert Decimal(raw.headers["x-gateway-cost-usd"]) == tokens * EMBED_IN / Decimal(10**6)


def test_spend_per_model_adds_up_and_secrets_stay_out(gw: Gateway) -> None:
    created = admin(gw, "/admin/keys", "POST", {"name": "e2e", "models": ["oa"], "budget_usd": 1})
    secret = created["key"]
    with client(gw, secret) as c:
        raw = c.chat.completions.with_raw_response.create(model="oa", messages=HI)
        with pytest.raises(openai.PermissionDeniedError):
            c.chat.completions.create(model="an", messages=HI)
        with pytest.raises(openai.AuthenticationError):
            client(gw, secret + "x").chat.completions.create(model="oa", messages=HI)
    cost = Decimal(raw.headers["x-gateway-cost-usd"])
    one = admin(gw, f"/admin/keys/{created['id']}")
    assert Decimal(one["spend_nanos"]) / 10**9 == cost
    spend = admin(gw, "/admin/spend")
    per_model = {m["model"]: m for m in spend["models"]}
    assert {"up/text", "claude/text", "gem/text", "ol/text"} <= per_model.keys()
    assert sum(m["spend_nanos"] for m in spend["models"]) == spend["total_nanos"]
    assert sum(k["spend_nanos"] for k in spend["keys"]) == spend["total_nanos"]
    mine = next(k for k in spend["keys"] if k["key_id"] == created["id"])
    assert mine["name"] == "e2e"
    answers = json.dumps([one, spend, admin(gw, "/admin/keys")])
    log = gw.log.read_text()
    for value in [secret, secret[6:], MASTER, *UPSTREAM_KEYS]:
        assert value not in answers
        assert value not in log
