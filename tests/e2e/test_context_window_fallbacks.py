"""Context-window fallbacks (S12): a context-length error moves only to a target whose
model takes a larger context (targets[].context_window or the shipped table), then to
`models[].fallbacks.context_window`; a content-policy refusal never moves (S13)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.flaky_upstream import FlakyOpenAI

pytestmark = pytest.mark.e2e

TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your "
        "messages resulted in 9000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
REFUSED = {
    "error": {
        "message": "Your request was rejected as a result of our safety system.",
        "type": "invalid_request_error",
        "param": None,
        "code": "content_policy_violation",
    }
}
UPSTREAMS = ("small", "peer", "big")


@pytest.fixture(scope="module")
def fakes() -> Iterator[dict[str, FlakyOpenAI]]:
    started = {name: FlakyOpenAI().start() for name in UPSTREAMS}
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(scope="module")
def gw(
    fakes: dict[str, FlakyOpenAI], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    providers = "\n".join(
        f'  - {{name: {n}, kind: openai, base_url: "{f.base_url}", keys: [{{key: sk-{n}}}]}}'
        for n, f in fakes.items()
    )
    config = f"""
store: {{url: "memory://"}}
routing: {{circuit_failures: 1000}}
providers:
{providers}
models:
  - name: tiered
    targets:
      - {{provider: small, model: small-8k, context_window: 8192, priority: 0}}
      - {{provider: peer, model: peer-8k, context_window: 8192, priority: 1}}
      # not configured: the shipped table's 128000 tokens for gpt-4o
      - {{provider: big, model: gpt-4o, priority: 2}}
  - name: short
    targets: [{{provider: small, model: small-8k, context_window: 8192}}]
    fallbacks: {{context_window: [long]}}
  - name: long
    targets: [{{provider: big, model: big-1m, context_window: 1000000}}]
  - name: alone
    targets: [{{provider: small, model: small-8k, context_window: 8192}}]
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("context-window"))
    yield gateway
    stop_gateway(gateway)


def marked() -> str:
    return f"a long prompt {uuid.uuid4().hex}"


def answer(gw: Gateway, model: str, text: str, stream: bool) -> tuple[str, dict[str, str]]:
    messages: Any = [{"role": "user", "content": text}]
    with openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=30) as client:
        if stream:
            raw = client.chat.completions.with_raw_response.create(
                model=model, messages=messages, stream=True
            )
            chunks = raw.parse()
            content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            return content, dict(raw.headers)
        got = client.chat.completions.with_raw_response.create(model=model, messages=messages)
        return got.parse().choices[0].message.content or "", dict(got.headers)


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_context_error_skips_targets_no_larger_and_moves_to_a_larger_one(
    gw: Gateway, fakes: dict[str, FlakyOpenAI], stream: bool
) -> None:
    text = marked()
    fakes["small"].script(text, [{"status": 400, "error": TOO_LONG}])
    content, headers = answer(gw, "tiered", text, stream)
    assert content
    assert headers["x-gateway-provider"] == "big"
    assert headers["x-gateway-model"] == "gpt-4o"
    assert headers["x-gateway-attempts"] == "2"
    assert [fakes[n].count(text) for n in UPSTREAMS] == [1, 0, 1]  # the same-size peer skipped


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "stream"])
def test_a_context_error_moves_to_the_configured_fallback_model(
    gw: Gateway, fakes: dict[str, FlakyOpenAI], stream: bool
) -> None:
    text = marked()
    fakes["small"].script(text, [{"status": 400, "error": TOO_LONG}])
    content, headers = answer(gw, "short", text, stream)
    assert content
    assert (headers["x-gateway-provider"], headers["x-gateway-model"]) == ("big", "big-1m")
    assert headers["x-gateway-attempts"] == "2"


def test_with_nothing_larger_the_client_gets_the_providers_context_error(
    gw: Gateway, fakes: dict[str, FlakyOpenAI]
) -> None:
    text = marked()
    fakes["small"].script(text, [{"status": 400, "error": TOO_LONG}])
    with pytest.raises(openai.BadRequestError) as caught:
        answer(gw, "alone", text, stream=False)
    assert caught.value.code == "context_length_exceeded"
    assert "maximum context length is 8192" in caught.value.message
    assert caught.value.response.headers["x-gateway-attempts"] == "1"
    assert fakes["small"].count(text) == 1


def test_a_content_policy_refusal_never_moves(gw: Gateway, fakes: dict[str, FlakyOpenAI]) -> None:
    text = marked()
    fakes["small"].script(text, [{"status": 400, "error": REFUSED}])
    with pytest.raises(openai.BadRequestError) as caught:
        answer(gw, "tiered", text, stream=False)
    assert caught.value.code == "content_policy_violation"
    assert caught.value.response.headers["x-gateway-attempts"] == "1"
    assert [fakes[n].count(text) for n in UPSTREAMS] == [1, 0, 0]
