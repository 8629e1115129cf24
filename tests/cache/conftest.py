"""A real gateway process with the response cache on, in front of the fake OpenAI upstream."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI


def cache_config(upstream: FakeOpenAI, cache: str, store: str = '"memory://"') -> str:
    return f"""
store: {{url: {store}}}
cache: {cache}
# failure scenarios share the one key: its health must not carry one test into the next
routing: {{cooldown_s: 0.001, auth_hold_s: 0.001, circuit_failures: 1000}}
keys:
  - {{name: alice, key: sk-alice-1}}
  - {{name: bob, key: sk-bob-1}}
providers:
  - name: up
    kind: openai
    base_url: {upstream.base_url}
    keys: [{{key: "{UPSTREAM_KEY}"}}]
    timeouts: {{first_byte_s: 5, idle_s: 5}}
models:
  - name: text
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 1000, output_per_mtok: 2000}}
  - name: tools
    targets: [{{provider: up, model: text-then-call}}]
  - name: parallel
    targets: [{{provider: up, model: interleaved-3}}]
  - name: slow
    targets: [{{provider: up, model: hold}}]
  - name: broken
    targets: [{{provider: up, model: truncated}}]
  - name: failing
    targets: [{{provider: up, model: error-after}}]
  - name: down
    targets: [{{provider: up, model: fail-500}}]
  - name: uncached
    targets: [{{provider: up, model: text}}]
    cache: {{mode: "off"}}
"""


@pytest.fixture(scope="session")
def upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="session")
def cached_gateway(
    upstream: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    config = cache_config(upstream, "{mode: exact, store: memory, ttl_s: 600}")
    gw = start_gateway(config, tmp_path_factory.mktemp("cache-gw"))
    yield gw
    stop_gateway(gw)
