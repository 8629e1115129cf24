"""What must not be cached is not, the controls work, identical concurrent misses make one
upstream call, and a hit is counted in the metrics with what it saved."""

from __future__ import annotations

import time
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest

from tests.cache.clients import chat
from tests.cache.clients import openai_client
from tests.cache.clients import upstream_calls
from tests.e2e.conftest import Gateway
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e


def fresh() -> str:
    return uuid.uuid4().hex


@pytest.mark.parametrize("model", ["broken", "failing"])
def test_a_cut_or_failed_stream_is_not_stored(
    cached_gateway: Gateway, upstream: FakeOpenAI, model: str
) -> None:
    prompt = f"cut {fresh()}"
    for _ in range(2):
        with pytest.raises(openai.APIError):
            chat(cached_gateway, prompt, stream=True, model=model)
    assert upstream_calls(upstream, prompt) == 2


def test_an_error_is_not_stored(cached_gateway: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"down {fresh()}"
    for _ in range(2):
        with pytest.raises(openai.InternalServerError):
            chat(cached_gateway, prompt, stream=False, model="down")
    assert upstream_calls(upstream, prompt) == 4  # each 500 tried once more on its target


def test_no_store_and_no_cache(cached_gateway: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"controls {fresh()}"
    header, _ = chat(cached_gateway, prompt, stream=False, headers={"Cache-Control": "no-store"})
    assert header == "bypass"
    header, _ = chat(cached_gateway, prompt, stream=True, headers={"Cache-Control": "no-cache"})
    assert header == "bypass"  # looked nothing up, but stored its answer
    header, _ = chat(cached_gateway, prompt, stream=False)
    assert header == "hit"
    assert upstream_calls(upstream, prompt) == 2


def test_a_model_with_cache_off_bypasses(cached_gateway: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"off {fresh()}"
    for _ in range(2):
        header, _ = chat(cached_gateway, prompt, stream=False, model="uncached")
        assert header == "bypass"
    assert upstream_calls(upstream, prompt) == 2


def test_other_keys_tools_or_temperature_do_not_hit(
    cached_gateway: Gateway, upstream: FakeOpenAI
) -> None:
    prompt = f"who {fresh()}"
    assert chat(cached_gateway, prompt, stream=False)[0] == "miss"
    assert chat(cached_gateway, prompt, stream=False, key="sk-bob-1")[0] == "miss"
    assert chat(cached_gateway, prompt, stream=False, temperature=0.2)[0] == "miss"
    assert chat(cached_gateway, prompt, stream=False, tools=[])[0] == "miss"
    # the same request with defaults spelled out and other delivery fields: a hit
    header, _ = chat(cached_gateway, prompt, stream=False, temperature=1, user="someone")
    assert header == "hit"
    assert upstream_calls(upstream, prompt) == 4


def test_ttl_expiry(cached_gateway: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"ttl {fresh()}"
    short = {"x-gateway-cache-ttl": "0.5"}
    assert chat(cached_gateway, prompt, stream=False, headers=short)[0] == "miss"
    assert chat(cached_gateway, prompt, stream=False)[0] == "hit"
    time.sleep(0.7)
    assert chat(cached_gateway, prompt, stream=False)[0] == "miss"
    assert upstream_calls(upstream, prompt) == 2


def test_fifty_identical_concurrent_misses(cached_gateway: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"herd {fresh()}"

    def one(_: int) -> str | None:
        return chat(cached_gateway, prompt, stream=False, model="slow")[0]

    with ThreadPoolExecutor(50) as pool:
        headers = list(pool.map(one, range(50)))
    assert upstream_calls(upstream, prompt) <= 3
    assert headers.count("miss") == upstream_calls(upstream, prompt)
    assert headers.count("hit") == 50 - headers.count("miss")


def test_hits_are_counted_with_what_they_saved(
    cached_gateway: Gateway, upstream: FakeOpenAI
) -> None:
    prompt = f"priced {fresh()}"
    client = openai_client(cached_gateway)
    args = {"model": "text", "messages": [{"role": "user", "content": prompt}]}
    first = client.chat.completions.with_raw_response.create(**args)  # type: ignore[call-overload]
    cost = float(first.headers["x-gateway-cost-usd"])
    assert cost > 0
    hit = client.chat.completions.with_raw_response.create(**args)  # type: ignore[call-overload]
    assert hit.headers["x-gateway-cache"] == "hit"
    assert float(hit.headers["x-gateway-cost-usd"]) == 0
    assert hit.parse().usage.prompt_tokens == first.parse().usage.prompt_tokens
    with urllib.request.urlopen(cached_gateway.url + "/metrics", timeout=5) as r:
        text = r.read().decode()
    assert 'gateway_cache_requests_total{model="text",result="hit"}' in text
    saved = [
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith('gateway_cache_saved_usd_total{model="text"}')
    ]
    assert saved
    assert saved[0] >= cost * 0.999
