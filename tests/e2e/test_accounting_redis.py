"""Two gateway processes sharing one redis-server: a key's rate limit and its budget hold
across both, and a key made through one works (and is revoked) on the other."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.redis_server import RedisServer
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = "sk-master-redis-e2e"
STATIC = "sk-static-rpm-e2e"


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Gateway]]:
    redis = RedisServer().start()
    fake = FakeOpenAI().start()
    config = f"""
auth: {{master_key: {MASTER}}}
store: {{url: "{redis.url()}"}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k}}]}}
models:
  - name: priced
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 2, output_per_mtok: 8}}
keys:
  - {{name: limited, key: {STATIC}, rpm: 4}}
"""
    first = start_gateway(config, tmp_path_factory.mktemp("gw-a"))
    second = start_gateway(config, tmp_path_factory.mktemp("gw-b"))
    try:
        yield first, second
    finally:
        stop_gateway(first)
        stop_gateway(second)
        fake.stop()
        redis.close()


def call(
    gw: Gateway, path: str, key: str, body: Any = None, method: str = "POST"
) -> tuple[int, dict[str, str], Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gw.url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {key}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as err:
        with err:
            return err.code, dict(err.headers), json.loads(err.read())


def chat(max_tokens: int = 10) -> dict[str, Any]:
    return {
        "model": "priced",
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "hi"}],
    }


def test_rpm_holds_across_both_gateways(pair: tuple[Gateway, Gateway]) -> None:
    answers = [call(pair[i % 2], "/v1/chat/completions", STATIC, chat()) for i in range(6)]
    assert [a[0] for a in answers] == [200, 200, 200, 200, 429, 429]
    assert 1 <= int(answers[4][1]["Retry-After"]) <= 60
    assert answers[5][2]["error"]["code"] == "rate_limit_exceeded"


def test_budget_holds_across_both_gateways(pair: tuple[Gateway, Gateway]) -> None:
    first, second = pair
    status, _, created = call(first, "/admin/keys", MASTER, {"name": "shared", "budget_usd": 0.002})
    assert status == 201
    secret = created["key"]

    def one(i: int) -> int:
        return call(pair[i % 2], "/v1/chat/completions", secret, chat())[0]

    with ThreadPoolExecutor(16) as pool:
        statuses = list(pool.map(one, range(60)))
    assert set(statuses) == {200, 429}
    _, _, seen_a = call(first, f"/admin/keys/{created['id']}", MASTER, method="GET")
    _, _, seen_b = call(second, f"/admin/keys/{created['id']}", MASTER, method="GET")
    assert seen_a["spend_nanos"] == seen_b["spend_nanos"]
    # each request reserves well under 200 microdollars and costs 78
    settled = Decimal(seen_a["spend_nanos"]) / 10**9
    assert Decimal("0.001") <= settled <= Decimal("0.002")
    assert statuses.count(200) * 78_000 == seen_a["spend_nanos"]
    # revoked through one gateway, refused by the other
    assert call(first, f"/admin/keys/{created['id']}", MASTER, method="DELETE")[0] == 200
    status, _, answer = call(second, "/v1/chat/completions", secret, chat())
    assert (status, answer["error"]["code"]) == (401, "key_revoked")
