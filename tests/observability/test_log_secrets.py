"""No secret in the logs: a gateway process with provider keys, a master key and virtual keys,
logging at debug level, is driven through successful and failing requests; then its whole
output is searched for every secret it knows (and for one made through the admin API)."""

from __future__ import annotations

import json
import secrets
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI


def secret(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


UPSTREAM_KEY = secret("sk-up")
BAD_KEY = secret("sk-bad")  # the fake upstream answers 401 to keys starting with sk-bad
MASTER_KEY = secret("sk-master")
VIRTUAL_KEY = secret("sk-virtual")
POOR_KEY = secret("sk-poor")


def config(upstream: FakeOpenAI, level: str, fmt: str) -> str:
    return f"""
auth: {{master_key: "{MASTER_KEY}"}}
store: {{url: "memory://"}}
logging: {{level: {level}, format: {fmt}}}
routing: {{cooldown_s: 0.001, auth_hold_s: 0.001}}
providers:
  - {{name: up, kind: openai, base_url: "{upstream.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  - {{name: badkeys, kind: openai, base_url: "{upstream.base_url}", keys: [{{key: "{BAD_KEY}"}}]}}
models:
  - name: smart
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 1000, output_per_mtok: 1000}}
  - name: rejected
    targets: [{{provider: badkeys, model: text}}]
  - name: failing
    targets: [{{provider: up, model: fail-500}}]
keys:
  - {{name: ci-bot, key: "{VIRTUAL_KEY}"}}
  - {{name: poor, key: "{POOR_KEY}", budget_usd: 0.0000001}}
"""


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


def call(
    gw: Gateway, path: str, key: str | None, body: dict[str, object] | None = None
) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    request = urllib.request.Request(
        gw.url + path,
        data=None if body is None else json.dumps(body).encode(),
        headers=headers,
        method="GET" if body is None else "POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read()


def chat(model: str, stream: bool = False) -> dict[str, object]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}


@pytest.mark.parametrize(("level", "fmt"), [("debug", "json"), ("info", "text")])
def test_no_secret_reaches_the_logs(
    upstream: FakeOpenAI, tmp_path: Path, level: str, fmt: str
) -> None:
    gw = start_gateway(config(upstream, level, fmt), tmp_path)
    try:
        expected = [
            ("/v1/chat/completions", VIRTUAL_KEY, chat("smart"), 200),
            ("/v1/chat/completions", VIRTUAL_KEY, chat("smart", stream=True), 200),
            ("/v1/chat/completions", MASTER_KEY, chat("up/text"), 200),
            ("/v1/chat/completions", "sk-not-a-key", chat("smart"), 401),
            ("/v1/chat/completions", None, chat("smart"), 401),
            ("/v1/chat/completions", POOR_KEY, chat("smart"), 429),
            ("/v1/chat/completions", VIRTUAL_KEY, chat("rejected"), 502),
            ("/v1/chat/completions", VIRTUAL_KEY, chat("failing"), 502),
            ("/v1/chat/completions", VIRTUAL_KEY, chat(UPSTREAM_KEY), 404),
            ("/admin/keys", VIRTUAL_KEY, {"name": "x"}, 403),
        ]
        for path, key, body, status in expected:
            got, answer = call(gw, path, key, body)
            assert got == status, (path, body, answer)
            assert UPSTREAM_KEY not in answer.decode() or body == chat(UPSTREAM_KEY)
        status, created = call(gw, "/admin/keys", MASTER_KEY, {"name": "made-here"})
        assert status == 201
        made_key = json.loads(created)["key"]
        assert call(gw, "/v1/chat/completions", made_key, chat("smart"))[0] == 200
        assert call(gw, "/admin/keys", MASTER_KEY)[0] == 200
    finally:
        assert stop_gateway(gw) == 0
    output = gw.log.read_text()

    access = [json.loads(line) for line in output.splitlines() if line.startswith('{"ts"')]
    access = [line for line in access if "route" in line]
    assert len(access) == len(expected) + 3  # one line per request, and they were written
    assert {"ci-bot", "poor", "made-here", "master"} <= {line["key"] for line in access}
    assert "rejected the credentials" in output  # the upstream 401 was logged (ERROR)
    # the model field echoes what the client sent: the one place a client can put a secret
    for leaked in (UPSTREAM_KEY, BAD_KEY, MASTER_KEY, VIRTUAL_KEY, POOR_KEY, made_key):
        assert leaked not in output
    assert "[redacted]" in output  # the client's own "model" value was redacted, not logged
