"""A hit is still the model's answer: a key that is revoked, or may not use the model, is
refused as it would be on a miss, even with the entry in the (shared) cache. The cache here
is the sqlite one, in the gateway's own store file."""

from __future__ import annotations

import json
import sqlite3
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from tests.cache.clients import chat
from tests.cache.clients import upstream_calls
from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e
MASTER = "sk-master-cache-keys-51c0"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("db") / "gw.db"


@pytest.fixture(scope="module")
def gw(
    upstream: FakeOpenAI, db: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    config = f"""
auth: {{master_key: {MASTER}}}
store: {{url: "sqlite:///{db}"}}
cache: {{mode: exact, namespace: shared}}
request_log: {{flush_s: 0.05}}
providers:
  - {{name: up, kind: openai, base_url: "{upstream.base_url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
models:
  - {{name: tools, targets: [{{provider: up, model: text-then-call}}]}}
  - name: text
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 1000, output_per_mtok: 2000}}
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("cache-keys"))
    yield gateway
    stop_gateway(gateway)


def admin(gw: Gateway, path: str, method: str = "GET", body: Any = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(gw.url + path, data=data, method=method)
    req.add_header("Authorization", f"Bearer {MASTER}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def test_a_key_that_may_not_use_the_model_gets_no_hit(gw: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"allowed {uuid.uuid4().hex}"
    filler = admin(gw, "/admin/keys", "POST", {"name": "filler", "models": ["tools"]})
    other = admin(gw, "/admin/keys", "POST", {"name": "other", "models": ["text"]})
    anyone = admin(gw, "/admin/keys", "POST", {"name": "anyone"})
    assert chat(gw, prompt, stream=False, key=filler["key"])[0] == "miss"
    assert chat(gw, prompt, stream=True, key=anyone["key"])[0] == "hit"  # shared namespace
    for stream in (False, True):
        with pytest.raises(openai.PermissionDeniedError):
            chat(gw, prompt, stream=stream, key=other["key"])
    assert upstream_calls(upstream, prompt) == 1


def test_a_revoked_key_gets_no_hit(gw: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"revoked {uuid.uuid4().hex}"
    key = admin(gw, "/admin/keys", "POST", {"name": "soon-revoked"})
    assert chat(gw, prompt, stream=False, key=key["key"])[0] == "miss"
    assert chat(gw, prompt, stream=False, key=key["key"])[0] == "hit"
    admin(gw, f"/admin/keys/{key['id']}", "DELETE")
    for stream in (False, True):
        with pytest.raises(openai.AuthenticationError):
            chat(gw, prompt, stream=stream, key=key["key"])
    with pytest.raises(openai.AuthenticationError):
        chat(gw, prompt, stream=False, key="sk-never-issued")
    assert upstream_calls(upstream, prompt) == 1


def test_the_master_key_has_entries_of_its_own(gw: Gateway, upstream: FakeOpenAI) -> None:
    prompt = f"master {uuid.uuid4().hex}"
    key = admin(gw, "/admin/keys", "POST", {"name": "tenant"})
    assert chat(gw, prompt, stream=False, key=key["key"])[0] == "miss"
    assert chat(gw, prompt, stream=False, key=MASTER)[0] == "miss"
    assert chat(gw, prompt, stream=False, key=MASTER)[0] == "hit"
    assert upstream_calls(upstream, prompt) == 2


def test_entries_live_in_the_store_file(gw: Gateway, db: Path) -> None:
    # the sqlite cache is the gateway's own file (no cache.url), in a table of its own
    rows = sqlite3.connect(db).execute("SELECT count(*) FROM response_cache").fetchone()[0]
    assert rows >= 3


def logged(gw: Gateway, request_id: str) -> Any:
    """The request log's record of `request_id`, once its batch is written."""
    deadline = time.monotonic() + 10
    while True:
        try:
            return admin(gw, f"/admin/requests/{request_id}")
        except urllib.error.HTTPError as err:  # not written yet
            if err.code != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.05)


def test_the_request_log_records_a_hit_and_what_it_saved(gw: Gateway) -> None:
    key = admin(gw, "/admin/keys", "POST", {"name": "logged"})
    with openai.OpenAI(base_url=gw.v1, api_key=key["key"], max_retries=0) as client:
        args: Any = {"model": "text", "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
        ids = [f"cache-log-{uuid.uuid4().hex}" for _ in range(2)]
        first = client.chat.completions.with_raw_response.create(
            **args, extra_headers={"x-request-id": ids[0]}
        )
        hit = client.chat.completions.with_raw_response.create(
            **args, extra_headers={"x-request-id": ids[1]}
        )
        assert hit.headers["x-gateway-cache"] == "hit"
        cost = float(first.headers["x-gateway-cost-usd"])
        records = [logged(gw, request_id) for request_id in ids]
        miss, hit_record = records
        assert (miss["cache"], hit_record["cache"]) == ("miss", "hit")
        assert miss["cost_usd"] == pytest.approx(cost)
        assert hit_record["cost_usd"] == 0
        assert hit_record["cache_saved_usd"] == pytest.approx(cost)
        assert not hit_record.get("attempts")  # nothing went upstream
        assert miss["attempts"]
        assert hit_record["key_name"] == "logged"
        assert hit_record["input_tokens"] == miss["input_tokens"]


def test_a_reused_request_id_on_a_hit_keeps_both_records_apart(gw: Gateway) -> None:
    """Two keys send the same x-request-id, the second is answered from the first's entry
    (a shared namespace): each record keeps its own gateway id and cache result, and the
    client's id finds both; neither overwrites the other."""
    reused = f"reused-{uuid.uuid4().hex}"
    args: Any = {"model": "text", "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
    results = []
    for name in ("reuse-a", "reuse-b"):
        key = admin(gw, "/admin/keys", "POST", {"name": name})
        with openai.OpenAI(base_url=gw.v1, api_key=key["key"], max_retries=0) as client:
            raw = client.chat.completions.with_raw_response.create(
                **args, extra_headers={"x-request-id": reused}
            )
            assert raw.headers["x-request-id"] == reused
            results.append(raw.headers["x-gateway-cache"])
    assert results == ["miss", "hit"]
    deadline = time.monotonic() + 10
    while True:
        found = admin(gw, f"/admin/requests?request_id={reused}")["data"]
        if len(found) >= 2 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert len(found) == 2
    assert len({r["id"] for r in found}) == 2
    by_key = {r["key_name"]: r for r in found}
    assert (by_key["reuse-a"]["cache"], by_key["reuse-b"]["cache"]) == ("miss", "hit")
    assert all(r["client_request_id"] == reused for r in found)
    assert logged(gw, reused)["key_name"] == "reuse-b"  # the id alone: its newest record


def test_admin_spend_counts_hits_and_what_they_saved(gw: Gateway) -> None:
    key = admin(gw, "/admin/keys", "POST", {"name": "spender"})
    with openai.OpenAI(base_url=gw.v1, api_key=key["key"], max_retries=0) as client:
        args: Any = {"model": "text", "messages": [{"role": "user", "content": uuid.uuid4().hex}]}
        first = client.chat.completions.with_raw_response.create(**args)
        cost = float(first.headers["x-gateway-cost-usd"])
        assert cost > 0
        for _ in range(2):
            assert (
                client.chat.completions.with_raw_response.create(**args).headers["x-gateway-cache"]
                == "hit"
            )
        spend = admin(gw, "/admin/spend")
        row = next(r for r in spend["keys"] if r["key_id"] == key["id"])
        assert row["requests"] == 1  # the miss; hits settle nothing
        assert row["spend_usd"] == pytest.approx(cost)
        assert row["cache_hits"] == 2
        assert row["cache_saved_usd"] == pytest.approx(2 * cost)
        model = next(m for m in spend["models"] if m["model"] == "text")
        assert model["cache_hits"] >= 2
