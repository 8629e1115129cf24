"""The redis store on a real three-master Redis Cluster (tests/redis_cluster.py).

The ledger contract of every store holds on the cluster; each virtual key's data lives on one
shard and different keys on different shards (the cluster is really used); two gateway
processes on the cluster hold one rpm and one budget against a client spraying both; and a
shard killed under load fails closed only the keys it owns (503 store_unavailable with
Retry-After), the others keep being served, and once it is back on its port with its data
everything is served again by the same gateways, with no descriptor leaked and no
acknowledged spend lost.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from gateway.store.kv import make_kv
from gateway.store.ledger import Ledger
from gateway.store.ledger import make_ledger
from tests.accounting.test_ledger_contract import NOW
from tests.accounting.test_ledger_contract import ask
from tests.accounting.test_ledger_contract import charge
from tests.accounting.test_ledger_contract import key
from tests.accounting.test_ledger_contract import ledger
from tests.accounting.test_ledger_contract import test_a_dead_reservation_expires
from tests.accounting.test_ledger_contract import test_a_static_record_needs_no_stored_key
from tests.accounting.test_ledger_contract import test_budget_reserve_settle_release
from tests.accounting.test_ledger_contract import test_concurrent_admissions_never_overshoot
from tests.accounting.test_ledger_contract import test_daily_budget_starts_again_each_day
from tests.accounting.test_ledger_contract import test_keys_are_listed_in_creation_order
from tests.accounting.test_ledger_contract import test_rpm_is_a_sliding_minute_with_retry_after
from tests.accounting.test_ledger_contract import test_spend_per_key_and_model
from tests.accounting.test_ledger_contract import test_tpm_counts_settled_tokens
from tests.accounting.test_ledger_contract import test_unknown_revoked_expired_and_model
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.e2e.test_accounting_redis import call
from tests.e2e.test_accounting_redis import chat
from tests.faults.load import admin
from tests.faults.load import fd_count
from tests.faults.load import not_recorded
from tests.faults.load import run_load
from tests.faults.load import settled_fd_count
from tests.redis_cluster import RedisClusterServers
from tests.redis_cluster import redis_cluster
from tests.upstreams.openai_upstream import FakeOpenAI

__all__ = [
    "ledger",
    "redis_cluster",
    "test_a_dead_reservation_expires",
    "test_a_static_record_needs_no_stored_key",
    "test_budget_reserve_settle_release",
    "test_concurrent_admissions_never_overshoot",
    "test_daily_budget_starts_again_each_day",
    "test_keys_are_listed_in_creation_order",
    "test_rpm_is_a_sliding_minute_with_retry_after",
    "test_spend_per_key_and_model",
    "test_tpm_counts_settled_tokens",
    "test_unknown_revoked_expired_and_model",
]

MASTER = "sk-master-cluster"
RPM_KEY = "sk-static-cluster-rpm"
RPM = 12
LOAD_S, DOWN_AT_S, DOWN_FOR_S = 11.0, 1.5, 2.5
FD_SLACK = 8


@pytest.fixture
def backend(redis_cluster: RedisClusterServers) -> Callable[[], Ledger]:
    """The contract's stores, here ledgers on the cluster (emptied first), which share its
    data as the gateway's processes do."""
    redis_cluster.flush()
    return lambda: make_ledger(redis_cluster.url())


def key_on(servers: RedisClusterServers, shard: int, prefix: str) -> str:
    """A key id whose hash tag lands on `shard`."""
    for n in range(10_000):
        key_id = f"{prefix}{n}"
        if servers.node_of(f"gw:{{{key_id}}}:vk") == shard:
            return key_id
    raise AssertionError("no id found")


async def test_each_keys_data_is_on_one_shard_and_keys_spread(
    redis_cluster: RedisClusterServers,
) -> None:
    redis_cluster.flush()
    ids = [key_on(redis_cluster, shard, "key_s") for shard in range(3)]
    store = make_ledger(redis_cluster.url())
    try:
        for n, key_id in enumerate(ids):
            record = key(id=key_id, secret_hash=f"h{n}", budget_nanos=10**6, rpm=5, tpm=10**6)
            await store.create_key(record)
            admitted = await store.admit(ask(f"t{n}", reserve=100, secret_hash=f"h{n}"))
            assert admitted.verdict == "ok"
            await store.settle(charge(f"t{n}", 40 + n, admitted.reserved_nanos, key_id=key_id))
        await store.settle(charge("anon", 7, 0, key_id=""))
        assert sorted(r.id for r in await store.list_keys()) == sorted(ids)
        spend = {(r.key_id, r.cost_nanos) for r in await store.spend()}
        assert spend == {(ids[0], 40), (ids[1], 41), (ids[2], 42), ("", 7)}
        for key_id in ids:
            assert (await store.key_spend(key_id, "total", NOW)).reserved_nanos == 0
    finally:
        await store.close()
    for shard, key_id in enumerate(ids):
        tagged = {
            k for k in redis_cluster.keys_on(shard) if k.startswith(f"gw:{{{key_id}}}".encode())
        }
        assert tagged == {f"gw:{{{key_id}}}:{w}".encode() for w in ("vk", "rq", "tk", "sp", "us")}
        for other in set(range(3)) - {shard}:
            assert not [k for k in redis_cluster.keys_on(other) if f"{{{key_id}}}".encode() in k]


async def test_the_key_value_store_on_the_cluster(redis_cluster: RedisClusterServers) -> None:
    """Key health and stored responses: one key per command, on the shard of its slot."""
    redis_cluster.flush()
    kv = make_kv(redis_cluster.url())
    try:
        assert await kv.ping() is True
        names = [f"health:up:{n}" for n in range(30)]
        for n, name in enumerate(names):
            await kv.put(name, str(n).encode(), 60)
        assert [await kv.get(name) for name in names] == [str(n).encode() for n in range(30)]
        await kv.put(names[0], b"", 0)  # a recovery deletes
        assert await kv.get(names[0]) is None
    finally:
        await kv.close()
    held = [
        len([k for k in redis_cluster.keys_on(i) if k.startswith(b"gw:health:")]) for i in range(3)
    ]
    assert sum(held) == 29
    assert all(held), held  # spread over every shard


# --- two gateway processes ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def pair(
    redis_cluster: RedisClusterServers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Gateway, Gateway]]:
    fake = FakeOpenAI().start()
    config = f"""
auth: {{master_key: {MASTER}}}
store: {{url: "{redis_cluster.url()}"}}
routing: {{deadline_s: 20}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: sk-up-cluster}}]}}
models:
  - name: priced
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 2, output_per_mtok: 8}}
keys:
  - {{name: sprayed, key: {RPM_KEY}, rpm: {RPM}}}
"""
    first = start_gateway(config, tmp_path_factory.mktemp("gw-cluster-a"))
    second = start_gateway(config, tmp_path_factory.mktemp("gw-cluster-b"))
    try:
        yield first, second
    finally:
        stop_gateway(first)
        stop_gateway(second)
        fake.stop()


def spray(pair: tuple[Gateway, Gateway], secret: str, requests: int) -> list[int]:
    """`requests` chat requests at once, alternating between the two gateways."""

    def one(i: int) -> int:
        return call(pair[i % 2], "/v1/chat/completions", secret, chat())[0]

    with ThreadPoolExecutor(24) as pool:
        return list(pool.map(one, range(requests)))


def test_one_rpm_and_one_budget_across_two_gateways(pair: tuple[Gateway, Gateway]) -> None:
    statuses = spray(pair, RPM_KEY, 60)
    assert statuses.count(200) == RPM, statuses  # the minute is one window for both
    assert set(statuses) == {200, 429}
    first, second = pair
    status, _, made = call(first, "/admin/keys", MASTER, {"name": "shared", "budget_usd": 0.002})
    assert status == 201
    statuses = spray(pair, made["key"], 80)
    assert set(statuses) == {200, 429}
    _, _, seen_a = call(first, f"/admin/keys/{made['id']}", MASTER, method="GET")
    _, _, seen_b = call(second, f"/admin/keys/{made['id']}", MASTER, method="GET")
    assert seen_a["spend_nanos"] == seen_b["spend_nanos"]
    # each request (max_tokens 10) reserves more than it costs (78 microdollars): the
    # budget is never passed, and every answer is in the spend
    assert seen_a["spend_nanos"] <= 2_000_000
    assert statuses.count(200) * 78_000 == seen_a["spend_nanos"]
    assert seen_a["spend_nanos"] > 2_000_000 - 2 * 78_000 - 200_000  # and it was used up
    listed = call(second, "/admin/keys", MASTER, method="GET")[2]["data"]
    assert made["id"] in {k["id"] for k in listed}


async def test_a_shard_restarted_under_load(
    redis_cluster: RedisClusterServers,
    pair: tuple[Gateway, Gateway],
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, second = pair
    made: list[dict[str, Any]] = []
    shards: list[int] = []
    while len(made) < 3 or len(set(shards)) < 3:  # keys on all three shards, by their ids
        created = await admin(
            first.url, MASTER, "POST", "/admin/keys", {"name": "r", "budget_usd": 100}
        )
        shard = redis_cluster.node_of(f"gw:{{{created['id']}}}:vk")
        if shard not in shards:
            made.append(created)
            shards.append(shard)
        assert len(made) + len(shards) < 200
    down = shards[0]
    loads = [(first, made[0]), (second, made[0]), (first, made[1]), (second, made[2])]
    for gw, created in loads:
        warm = await run_load(gw.url, created["key"], seconds=0.4, concurrency=2)
        assert warm.outcomes["success"] == warm.requests > 0
    fds_before = [fd_count(gw.proc.pid, gw.port) for gw in pair]
    spent_before = [await _spent(first, c["id"]) for c in made]
    marks: dict[str, float] = {}
    ready_while_down: list[int] = []

    async def fault() -> None:
        start = time.monotonic()
        await asyncio.sleep(DOWN_AT_S)
        await asyncio.to_thread(redis_cluster.stop_node, down)  # SIGKILL, by its PID
        marks["down"] = time.monotonic() - start
        await asyncio.sleep(DOWN_FOR_S / 2)
        ready_while_down.append(await asyncio.to_thread(_status, first.url + "/readyz"))
        await asyncio.sleep(DOWN_FOR_S / 2)
        await asyncio.to_thread(redis_cluster.start_node, down)  # same port, same data
        marks["up"] = time.monotonic() - start

    tallies = await asyncio.gather(
        *(run_load(gw.url, c["key"], seconds=LOAD_S, concurrency=3) for gw, c in loads), fault()
    )
    lines = [t.line(f"cluster-shard-restart key{n}") for n, t in enumerate(tallies[:-1])]
    with capsys.disabled():
        print("\n" + "\n".join(lines))
    for tally, line in zip(tallies[:-1], lines, strict=True):
        assert tally.outcomes["hang"] == 0, line
        assert tally.outcomes["other_error"] == 0, f"{line}\n{tally.problems[:5]}"
        after = [o for t, o in tally.timeline if t > marks["up"] + 1.0]
        assert after, (marks, line)
        assert all(o == "success" for o in after), (marks, line)
    # the down shard's key failed closed; the others never noticed
    assert tallies[0].outcomes["store_error"] + tallies[1].outcomes["store_error"] > 0
    assert tallies[2].outcomes["store_error"] == tallies[3].outcomes["store_error"] == 0
    assert ready_while_down == [200]
    # nothing acknowledged is lost: each key's spend covers every answer whose settle was
    # acknowledged, and is no more than all its answers
    lost = not_recorded(first.log) | not_recorded(second.log)
    for n, created in enumerate(made):
        ours = [t for (gw, c), t in zip(loads, tallies, strict=False) if c is created]
        answered = sum(sum(t.costs.values()) for t in ours)
        acked = answered - sum(c for t in ours for rid, c in t.costs.items() if rid in lost)
        spent = await _spent(first, created["id"]) - spent_before[n]
        assert acked <= spent <= answered, (n, acked, spent, answered)
    for gw, before in zip(pair, fds_before, strict=True):
        after_fds = await settled_fd_count(gw.proc.pid, gw.port, before + FD_SLACK)
        assert after_fds <= before + FD_SLACK, (before, after_fds)
        assert gw.proc.poll() is None
        assert "Traceback" not in gw.log.read_text()


async def _spent(gw: Gateway, key_id: str) -> int:
    found = await admin(gw.url, MASTER, "GET", f"/admin/keys/{key_id}")
    return int(found["spend_nanos"])


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
