"""A request written to a kept-alive upstream connection that closes before answering is an
attempt like any other: counted in x-gateway-attempts, failed over, and never sent to that
upstream a second time (on today's main it was resent on a fresh connection, invisibly)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.hangup_upstream import HangupOnReuse
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e


@pytest.fixture
def hangup() -> Iterator[HangupOnReuse]:
    fake = HangupOnReuse().start()
    yield fake
    fake.stop()


@pytest.fixture
def good() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture
def gw(hangup: HangupOnReuse, good: FakeOpenAI, tmp_path: Path) -> Iterator[Gateway]:
    config = f"""
store: {{url: "memory://"}}
routing: {{cooldown_s: 0.001, circuit_failures: 1000}}
providers:
  - {{name: hang, kind: openai, base_url: "{hangup.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  - {{name: good, kind: openai, base_url: "{good.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
models:
  - name: m
    targets:
      - {{provider: hang, model: text, priority: 0}}
      - {{provider: good, model: text, priority: 1}}
"""
    gateway = start_gateway(config, tmp_path)
    yield gateway
    stop_gateway(gateway)


def test_a_hangup_after_the_request_was_written_is_an_attempt_not_a_resend(
    gw: Gateway, hangup: HangupOnReuse
) -> None:
    with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
        first = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": "warm the connection"}]
        )
        assert first.headers["x-gateway-provider"] == "hang"
        marker = uuid.uuid4().hex
        second = client.chat.completions.with_raw_response.create(
            model="m", messages=[{"role": "user", "content": marker}]
        )
        assert second.parse().choices[0].message.content
        # the hang-up was the first attempt: seen, counted, retried once on its target
        # (routing.retries_per_target, default 1: hung up again), failed over
        assert second.headers["x-gateway-attempts"] == "3"
        assert second.headers["x-gateway-provider"] == "good"
        # every body the upstream had is a counted attempt: never sent again unseen
        assert sum(marker in json.dumps(b) for b in hangup.bodies) == 2
