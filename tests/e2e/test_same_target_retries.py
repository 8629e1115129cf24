"""routing.retries_per_target against a real gateway: a 500 once (S03) or a reset is tried
again on the same target after a short jittered backoff; a 429 with a short Retry-After
(S01) is waited out when nothing else could answer sooner, and moved past at once when
another target can; a Retry-After past max_retry_wait_s is never waited. Every retry is an
attempt (x-gateway-attempts)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.flaky_upstream import FlakyOpenAI

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def flaky() -> Iterator[FlakyOpenAI]:
    fake = FlakyOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def backup() -> Iterator[FlakyOpenAI]:
    fake = FlakyOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gw(
    flaky: FlakyOpenAI, backup: FlakyOpenAI, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    config = f"""
store: {{url: "memory://"}}
# the defaults: retries_per_target 1, max_retry_wait_s 5
routing: {{circuit_failures: 1000}}
providers:
  - {{name: flaky, kind: openai, base_url: "{flaky.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  - {{name: backup, kind: openai, base_url: "{backup.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
models:
  - {{name: alone, targets: [{{provider: flaky, model: text}}]}}
  - name: paired
    targets:
      - {{provider: flaky, model: text, priority: 0}}
      - {{provider: backup, model: text, priority: 1}}
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("retries"))
    yield gateway
    stop_gateway(gateway)


def ask(gw: Gateway, model: str, marker: str) -> dict[str, str]:
    with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
        raw = client.chat.completions.with_raw_response.create(
            model=model, messages=[{"role": "user", "content": marker}]
        )
        assert raw.parse().choices[0].message.content
        return dict(raw.headers)


def test_a_500_once_is_retried_on_the_same_target(gw: Gateway, flaky: FlakyOpenAI) -> None:
    marker = uuid.uuid4().hex
    flaky.script(marker, [{"status": 500}])
    headers = ask(gw, "alone", marker)
    assert headers["x-gateway-attempts"] == "2"
    assert headers["x-gateway-provider"] == "flaky"
    assert flaky.count(marker) == 2
    (_, first), (_, second) = [a for a in flaky.arrivals if marker in a[0]]
    assert 0.09 <= second - first < 1.0  # the jittered backoff, 0.1-0.3 s


def test_two_500s_use_up_the_retry_and_fail_over(
    gw: Gateway, flaky: FlakyOpenAI, backup: FlakyOpenAI
) -> None:
    marker = uuid.uuid4().hex
    flaky.script(marker, [{"status": 500}, {"status": 500}])
    headers = ask(gw, "paired", marker)
    assert headers["x-gateway-attempts"] == "3"
    assert headers["x-gateway-provider"] == "backup"
    assert (flaky.count(marker), backup.count(marker)) == (2, 1)


def test_a_short_retry_after_is_waited_out_when_nothing_else_can_answer(
    gw: Gateway, flaky: FlakyOpenAI
) -> None:
    marker = uuid.uuid4().hex
    flaky.script(marker, [{"status": 429, "retry_after": "1"}])
    started = time.monotonic()
    headers = ask(gw, "alone", marker)
    assert time.monotonic() - started >= 1.0
    assert headers["x-gateway-attempts"] == "2"
    assert flaky.count(marker) == 2


def test_a_429_moves_on_at_once_when_another_target_can_answer(
    gw: Gateway, flaky: FlakyOpenAI, backup: FlakyOpenAI
) -> None:
    marker = uuid.uuid4().hex
    flaky.script(marker, [{"status": 429, "retry_after": "1"}])
    started = time.monotonic()
    headers = ask(gw, "paired", marker)
    assert time.monotonic() - started < 0.9  # not waited: the backup was sooner
    assert headers["x-gateway-provider"] == "backup"
    assert (flaky.count(marker), backup.count(marker)) == (1, 1)
    time.sleep(1.1)  # the flaky key's cooldown over, for the tests after this one


def test_a_retry_after_past_the_bound_is_not_waited(gw: Gateway, flaky: FlakyOpenAI) -> None:
    marker = uuid.uuid4().hex
    flaky.script(marker, [{"status": 429, "retry_after": "6"}])  # max_retry_wait_s: 5
    with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
        started = time.monotonic()
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(
                model="alone", messages=[{"role": "user", "content": marker}]
            )
        assert time.monotonic() - started < 1.5
        assert flaky.count(marker) == 1
        time.sleep(3.1)  # its cooldown over
