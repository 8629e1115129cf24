"""Failover until the first answer byte, even after a time-based commit (S06): a silent
upstream lets commit_after_s pass (headers and keep-alives reach the client), then its
first-byte timeout fires; the next target's answer continues the same stream, announced by
an SSE comment, and real clients assemble it whole. With no target left, the committed stream
ends with an error event."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def gw(upstream: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    base, key = upstream.base_url, UPSTREAM_KEY
    config = f"""
store: {{url: "memory://"}}
server: {{commit_after_s: 0.2, keepalive_s: 0.1}}
routing: {{circuit_failures: 1000, cooldown_s: 0.001}}
providers:
  - name: silent
    kind: openai
    base_url: "{base}"
    keys: [{{key: "{key}"}}]
    timeouts: {{first_byte_s: 0.6}}
  - {{name: backup, kind: openai, base_url: "{base}", keys: [{{key: "{key}"}}]}}
models:
  - name: m
    targets:
      - {{provider: silent, model: hold, priority: 0}}
      - {{provider: backup, model: text, priority: 1}}
  - name: none-left
    targets: [{{provider: silent, model: hold}}]
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("after-commit"))
    yield gateway
    stop_gateway(gateway)


def test_openai_python_gets_the_backup_answer_after_the_commit(gw: Gateway) -> None:
    with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
        direct = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )  # not streamed: the same failover, no commit
        stream = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        assert text
        assert text == direct.choices[0].message.content


def test_the_stream_says_who_took_over(gw: Gateway) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    with httpx.stream("POST", gw.v1 + "/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        raw = b"".join(response.iter_bytes()).decode()
    keepalive = raw.index(": keep-alive") if ": keep-alive" in raw else raw.index(":")
    announced = raw.index(": gateway-failover provider=backup attempts=2")
    assert keepalive < announced < raw.index("data: ")
    assert raw.rstrip().endswith("data: [DONE]")


def test_anthropic_python_gets_the_backup_answer(gw: Gateway) -> None:
    with anthropic.Anthropic(base_url=gw.url, api_key="any", max_retries=0) as client:
        with client.messages.stream(
            model="m", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
        ) as events:
            message = events.get_final_message()
        assert "".join(b.text for b in message.content if b.type == "text")
        assert message.stop_reason == "end_turn"


def test_no_target_left_ends_the_committed_stream_with_an_error(gw: Gateway) -> None:
    with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
        stream = client.chat.completions.create(
            model="none-left", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        with pytest.raises(openai.APIError, match="no byte from the upstream"):
            for _ in stream:
                pass
