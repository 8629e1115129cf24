"""Circuits that come back on time (S15, a flapping primary): when a key's open period ends
the gateway probes it itself, so a recovered upstream is back in rotation before any client
asks, and a still-failing one is re-opened without a client's request paying for it."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.flaky_upstream import FlakyOpenAI

pytestmark = pytest.mark.e2e

MASTER = "mk-probe"
PROBE_TEXT = "ping"  # what the gateway's probe asks (gateway/server/circuit_probe.py)


@pytest.fixture
def flaky() -> Iterator[FlakyOpenAI]:
    fake = FlakyOpenAI().start()
    yield fake
    fake.stop()


def serve(flaky: FlakyOpenAI, tmp_path: Path, *, probe: bool = True) -> Gateway:
    config = f"""
store: {{url: "memory://"}}
auth: {{master_key: {MASTER}}}
routing:
  circuit_failures: 2
  circuit_open_s: 0.5
  circuit_max_open_s: 1
  retries_per_target: 0
  circuit_probe: {"true" if probe else "false"}
providers:
  - {{name: flaky, kind: openai, base_url: "{flaky.base_url}", keys: [{{key: sk-up, name: k}}]}}
models:
  - {{name: alone, targets: [{{provider: flaky, model: text}}]}}
"""
    return start_gateway(config, tmp_path)


def key_state(gw: Gateway) -> dict[str, Any]:
    request = urllib.request.Request(
        gw.url + "/admin/health", headers={"Authorization": f"Bearer {MASTER}"}
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        report = json.load(answer)
    (provider,) = report["providers"]
    (key,) = provider["keys"]
    return dict(key)


def ask(gw: Gateway, marker: str) -> int:
    """The status the client got."""
    with openai.OpenAI(base_url=gw.v1, api_key=MASTER, max_retries=0, timeout=30) as client:
        try:
            client.chat.completions.create(
                model="alone", messages=[{"role": "user", "content": marker}]
            )
        except openai.APIStatusError as err:
            return err.status_code
        return 200


def open_circuit(gw: Gateway, flaky: FlakyOpenAI) -> str:
    marker = uuid.uuid4().hex
    flaky.script(marker, [{"status": 500}, {"status": 500}])
    assert [ask(gw, marker), ask(gw, marker)] == [502, 502]
    assert key_state(gw)["state"] == "circuit_open"
    assert ask(gw, marker) == 503  # refused while open: nothing sent
    assert flaky.count(marker) == 2
    return marker


def wait_for_state(gw: Gateway, state: str, bound_s: float) -> dict[str, Any]:
    end = time.monotonic() + bound_s
    while True:
        key = key_state(gw)
        if key["state"] == state or time.monotonic() > end:
            return key
        time.sleep(0.05)


def probes(flaky: FlakyOpenAI) -> int:
    return flaky.count(f'"content": "{PROBE_TEXT}"')


def test_a_recovered_upstream_is_closed_by_the_probe_before_any_client_asks(
    flaky: FlakyOpenAI, tmp_path: Path
) -> None:
    gw = serve(flaky, tmp_path)
    try:
        marker = open_circuit(gw, flaky)
        key = wait_for_state(gw, "healthy", 5.0)
        assert key["state"] == "healthy", key
        assert key["circuit_opens"] == 0
        assert probes(flaky) == 1
        assert flaky.count(marker) == 2  # no client request was the probe
        assert ask(gw, marker) == 200
    finally:
        stop_gateway(gw)


def test_a_failed_probe_reopens_the_circuit_and_the_next_one_closes_it(
    flaky: FlakyOpenAI, tmp_path: Path
) -> None:
    flaky.script(f'"content": "{PROBE_TEXT}"', [{"status": 503}])  # the first probe fails
    gw = serve(flaky, tmp_path)
    try:
        marker = open_circuit(gw, flaky)
        opened = time.monotonic()
        end = opened + 5.0
        reopened = key_state(gw)
        while reopened["circuit_opens"] < 2 and time.monotonic() < end:
            time.sleep(0.02)
            reopened = key_state(gw)
        assert probes(flaky) == 1
        assert reopened["state"] == "circuit_open", reopened  # the failed probe opened it again
        key = wait_for_state(gw, "healthy", 5.0)
        assert key["state"] == "healthy", key
        # the second open period is capped by circuit_max_open_s (1 s), not doubled past it
        assert time.monotonic() - opened < 4.0
        assert probes(flaky) == 2
        assert flaky.count(marker) == 2
        assert ask(gw, marker) == 200
    finally:
        stop_gateway(gw)


def test_with_circuit_probe_off_a_real_request_is_the_probe(
    flaky: FlakyOpenAI, tmp_path: Path
) -> None:
    gw = serve(flaky, tmp_path, probe=False)
    try:
        marker = open_circuit(gw, flaky)
        key = wait_for_state(gw, "half_open", 5.0)
        assert key["state"] == "half_open", key
        time.sleep(0.5)
        assert probes(flaky) == 0
        assert ask(gw, marker) == 200  # the client's request was the probe
        assert key_state(gw)["state"] == "healthy"
    finally:
        stop_gateway(gw)
