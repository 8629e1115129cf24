"""A hit needs no upstream: with the model's only provider key out of rotation (its
upstream answered 500 and its circuit opened), a stored answer is still served (with
openai-python), while a new question gets the honest 503 the open circuit makes; the cache
key does not change with the key's health."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import openai
import pytest

from tests.cache.clients import chat
from tests.cache.clients import openai_client
from tests.cache.clients import upstream_calls
from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e


@pytest.fixture
def cooling_gateway(  # one per test: each opens the key's circuit for two minutes
    upstream: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    config = f"""
store: {{url: "memory://"}}
auth: {{master_key: sk-master-outage-0123456789}}
cache: {{mode: exact, store: memory, ttl_s: 600}}
routing: {{circuit_failures: 1, circuit_open_s: 120, circuit_max_open_s: 120, max_attempts: 1}}
keys:
  - {{name: alice, key: sk-alice-1}}
providers:
  - name: up
    kind: openai
    base_url: {upstream.base_url}
    keys: [{{key: "{UPSTREAM_KEY}"}}]
models:
  - name: tools
    targets: [{{provider: up, model: text-then-call}}]
  - name: trip
    targets: [{{provider: up, model: fail-500}}]
"""
    gw = start_gateway(config, tmp_path_factory.mktemp("cache-cooling"))
    yield gw
    stop_gateway(gw)


@pytest.mark.parametrize("hit_stream", [False, True])
def test_a_hit_is_served_while_the_only_key_is_out(
    cooling_gateway: Gateway, upstream: FakeOpenAI, hit_stream: bool
) -> None:
    prompt = f"cached before the outage {uuid.uuid4().hex}"
    header, first = chat(cooling_gateway, prompt, stream=False)
    assert header == "miss"
    client = openai_client(cooling_gateway)
    with pytest.raises(openai.APIStatusError):  # the upstream's 500: the circuit opens
        client.chat.completions.create(model="trip", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.APIStatusError) as refused:  # nothing usable for a new question
        chat(cooling_gateway, f"new {uuid.uuid4().hex}", stream=False)
    assert refused.value.status_code == 503
    header, again = chat(cooling_gateway, prompt, stream=hit_stream)
    assert header == "hit"
    assert again["text"] == first["text"]
    assert again["calls"] == first["calls"]
    assert upstream_calls(upstream, prompt) == 1


def test_an_unknown_model_is_vouched_before_the_cache_is_asked(cooling_gateway: Gateway) -> None:
    # the lookup comes before planning now: a wrong virtual key must still learn nothing of
    # the models (401, not 404), and a good one gets the honest 404
    question = [{"role": "user", "content": "hello"}]
    with pytest.raises(openai.AuthenticationError):
        openai_client(cooling_gateway, "sk-nobody").chat.completions.create(
            model="no-such-model", messages=question
        )
    with pytest.raises(openai.NotFoundError):
        openai_client(cooling_gateway).chat.completions.create(
            model="no-such-model", messages=question
        )
