"""Reload in a real gateway process (gateway/server/reload.py): SIGHUP, a file rewritten in
place, a ConfigMap-style symlink swap; an invalid file changes nothing; what must survive a
reload (a key's cooldown, a virtual key's spend and budget) does."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.reloading import MASTER
from tests.server.reloading import PICKUP_S
from tests.server.reloading import Served
from tests.server.reloading import admin_config
from tests.server.reloading import call
from tests.server.reloading import chat
from tests.server.reloading import configmap
from tests.server.reloading import launch
from tests.server.reloading import reload_count
from tests.server.reloading import rewrite
from tests.server.reloading import swap_configmap
from tests.server.reloading import within
from tests.upstreams.openai_upstream import FakeOpenAI

VIRTUAL = "sk-vk-reload-budget-51c2"


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


def config(upstream: FakeOpenAI, models: str = "", budget: float = 5.0, extra: str = "") -> str:
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: "memory://"}}
providers:
  - {{name: up, kind: openai, base_url: "{upstream.base_url}", keys: [{{key: sk-up-1}}]}}
  - {{name: limited, kind: openai, base_url: "{upstream.base_url}", keys: [{{key: sk-rl-60}}]}}
models:
  - name: base
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 1000, output_per_mtok: 1000}}
{models}
keys:
  - {{name: tenant, key: {VIRTUAL}, budget_usd: {budget}}}
{extra}
"""


def model(name: str, upstream_model: str = "text") -> str:
    return f"  - {{name: {name}, targets: [{{provider: up, model: {upstream_model}}}]}}\n"


def served_by(gateway: Served, name: str) -> bool:
    return chat(gateway, name)[0] == 200


@pytest.fixture
def gateway(upstream: FakeOpenAI, tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "gateway.yaml"
    path.write_text(config(upstream))
    served = launch(path)
    yield served
    served.stop()


def test_sighup_adds_a_model(gateway: Served, upstream: FakeOpenAI) -> None:
    assert chat(gateway, "fresh")[0] == 404
    # the same mtime and size would not show as a change: only the signal says "reload"
    gateway.path.write_text(config(upstream, model("fresh")))
    gateway.hup()
    within(PICKUP_S, lambda: served_by(gateway, "fresh"))
    _status, answer = chat(gateway, "fresh")
    assert answer["choices"][0]["message"]["content"] == "Hello, world!"
    report = admin_config(gateway)["last_reload"]
    assert report["result"] == "ok"
    assert reload_count(gateway, "ok") >= 1
    assert chat(gateway, "base")[0] == 200  # the rest is still served


def test_a_rewritten_file_is_picked_up_and_sha256_is_the_files(
    gateway: Served, upstream: FakeOpenAI
) -> None:
    text = config(upstream, model("rewritten"))
    rewrite(gateway.path, text)
    took = within(PICKUP_S, lambda: served_by(gateway, "rewritten"))
    assert took < PICKUP_S
    shown = admin_config(gateway)
    assert shown["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    assert shown["path"] == str(gateway.path)
    assert shown["loaded_at"].endswith("Z")
    assert "T" in shown["loaded_at"]
    assert [m["name"] for m in shown["config"]["models"]] == ["base", "rewritten"]


def test_an_invalid_file_changes_nothing_then_a_valid_one_applies(
    gateway: Served, upstream: FakeOpenAI
) -> None:
    before = admin_config(gateway)
    errors = reload_count(gateway, "error")
    broken = config(upstream, model("never") + "  - {name: base, targets: []}\n")
    broken = broken.replace("budget_usd: 5.0", "budget_usd: -1, rpm: zero")
    rewrite(gateway.path, broken)
    within(PICKUP_S, lambda: reload_count(gateway, "error") == errors + 1)
    shown = admin_config(gateway)
    assert shown["sha256"] == before["sha256"]  # the config in force did not change
    assert shown["config"] == before["config"]
    report = shown["last_reload"]
    assert report["result"] == "error"
    assert report["sha256"] == hashlib.sha256(broken.encode()).hexdigest()
    paths = {problem.partition(":")[0] for problem in report["problems"]}
    # every problem, each naming its field
    assert {"models[2].name", "models[2].targets", "keys[0].budget_usd", "keys[0].rpm"} <= paths
    assert chat(gateway, "never")[0] == 404
    assert chat(gateway, "base")[0] == 200
    (line,) = [
        line for line in gateway.log_text().splitlines() if '"result":"error"' in line
    ]  # one line, with every problem
    logged = json.loads(line.partition("config reload: ")[2])
    assert logged["problems"] == report["problems"]
    assert VIRTUAL not in gateway.log_text()
    assert MASTER not in gateway.log_text()

    rewrite(gateway.path, config(upstream, model("later")))
    within(PICKUP_S, lambda: served_by(gateway, "later"))
    assert admin_config(gateway)["last_reload"]["result"] == "ok"


def test_a_restart_only_change_is_refused_whole(gateway: Served, upstream: FakeOpenAI) -> None:
    errors = reload_count(gateway, "error")
    text = config(upstream, model("with-store")).replace('"memory://"', '"sqlite:///x.db"')
    text += "\nserver: {max_body_bytes: 4096}\n"
    rewrite(gateway.path, text)
    within(PICKUP_S, lambda: reload_count(gateway, "error") == errors + 1)
    problems = admin_config(gateway)["last_reload"]["problems"]
    assert [p.partition(":")[0] for p in problems] == ["server.max_body_bytes", "store.url"]
    assert chat(gateway, "with-store")[0] == 404  # nothing of that file applied


def test_a_configmap_symlink_swap_is_picked_up(upstream: FakeOpenAI, tmp_path: Path) -> None:
    directory = tmp_path / "configmap"
    path = configmap(directory, config(upstream))
    gateway = launch(path)
    try:
        swap_configmap(directory, config(upstream, model("swapped")))
        within(PICKUP_S, lambda: served_by(gateway, "swapped"))
        swap_configmap(directory, config(upstream, model("again")))
        within(PICKUP_S, lambda: served_by(gateway, "again"))
        assert chat(gateway, "swapped")[0] == 404
        text = (directory / "..data" / "config.yaml").read_bytes()
        assert admin_config(gateway)["sha256"] == hashlib.sha256(text).hexdigest()
    finally:
        gateway.stop()


def test_cooldown_and_spend_survive_a_reload(gateway: Served, upstream: FakeOpenAI) -> None:
    limited = model("cooled", "text").replace("provider: up", "provider: limited")
    rewrite(gateway.path, config(upstream, limited))
    within(PICKUP_S, lambda: chat(gateway, "cooled")[0] != 404)
    # the upstream answered 429 with Retry-After: 60: that key rests for a minute
    seen = len(upstream.requests)
    assert chat(gateway, "cooled")[0] == 429
    assert len(upstream.requests) == seen  # refused by the gateway, upstream not asked
    status, answer = chat(gateway, "base", key=VIRTUAL)
    assert status == 200
    spent = key_spend(gateway)
    assert spent > 0

    # a new model, the same keys (and the virtual key's budget now below what it spent)
    lower = round(spent / 2, 6)
    rewrite(gateway.path, config(upstream, limited + model("next"), budget=lower))
    within(PICKUP_S, lambda: served_by(gateway, "next"))
    seen = len(upstream.requests)
    assert chat(gateway, "cooled")[0] == 429  # still cooling down
    assert len(upstream.requests) == seen
    health = json.loads(call(gateway, "GET", "/admin/health")[1])
    (limited_key,) = next(p for p in health["providers"] if p["name"] == "limited")["keys"]
    assert limited_key["cooldowns"].get("text") is not None
    assert key_spend(gateway) == spent  # spend carried over
    status, answer = chat(gateway, "base", key=VIRTUAL)
    assert (status, answer["error"]["code"]) == (429, "budget_exceeded")  # the new budget

    # a key whose secret changed is a new key: no cooldown
    fresh = limited.replace("provider: limited", "provider: up")
    rewrite(gateway.path, config(upstream, fresh + model("third")))
    within(PICKUP_S, lambda: served_by(gateway, "third"))
    assert chat(gateway, "cooled")[0] == 200


def key_spend(gateway: Served) -> float:
    status, raw = call(gateway, "GET", "/admin/keys/cfg-tenant")
    assert status == 200, raw
    spend: float = json.loads(raw)["spend_usd"]
    return spend
