"""The contract every accounting store keeps (memory, sqlite in tmp_path, a real redis):
admission verdicts, reservations, settling, windows, keys and spend."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.accounting.keys import budget_windows
from gateway.store.ledger import Admission
from gateway.store.ledger import CacheHits
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import Ledger
from gateway.store.ledger import make_ledger
from gateway.store.memory_ledger import MemoryLedger
from tests.redis_server import RedisServer

NOW = 1_764_000_000.0


@pytest.fixture(params=["memory", "sqlite", "redis"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], Ledger]:
    """Makes ledgers of one backend; the persistent ones share their data (one file, one
    redis database), as the workers and replicas of a gateway do."""
    if request.param == "memory":
        return lambda: make_ledger("memory://")
    if request.param == "sqlite":
        return lambda: make_ledger(f"sqlite:///{tmp_path}/gateway.db")
    server: RedisServer = request.getfixturevalue("redis_server")
    return lambda: make_ledger(server.url())


@pytest.fixture
async def ledger(backend: Callable[[], Ledger]) -> AsyncIterator[Ledger]:
    store = backend()
    try:
        yield store
    finally:
        await store.close()


def key(**fields: object) -> KeyRecord:
    base: dict[str, object] = {"id": "key_1", "name": "k", "secret_hash": "h1", "created_at": NOW}
    return KeyRecord(**(base | fields))  # type: ignore[arg-type]


def ask(
    ticket: str,
    *,
    now: float = NOW,
    model: str = "m",
    reserve: int = 0,
    tokens: int = 0,
    hold_s: float = 600.0,
    secret_hash: str = "h1",
) -> Admission:
    return Admission(
        ticket=ticket,
        now=now,
        model=model,
        reserve_nanos=reserve,
        tokens=tokens,
        hold_s=hold_s,
        windows=budget_windows(now),
        secret_hash=secret_hash,
    )


def charge(
    ticket: str,
    cost: int,
    reserved: int,
    *,
    now: float = NOW,
    window: str = "total",
    key_id: str = "key_1",
    tokens: tuple[int, int] = (10, 5),
) -> Charge:
    return Charge(
        key_id=key_id,
        model="up/m",
        cost_nanos=cost,
        input_tokens=tokens[0],
        output_tokens=tokens[1],
        estimated=False,
        now=now,
        ticket=ticket,
        window=window,
        reserved_nanos=reserved,
    )


async def test_unknown_revoked_expired_and_model(ledger: Ledger) -> None:
    assert (await ledger.admit(ask("t0"))).verdict == "unknown"
    await ledger.create_key(key(models=["m"], expires_at=NOW + 10))
    assert (await ledger.admit(ask("t1"))).verdict == "ok"
    assert (await ledger.admit(ask("t2", model="other"))).verdict == "model"
    assert (await ledger.admit(ask("t3", now=NOW + 10))).verdict == "expired"
    assert await ledger.revoke_key("key_1")
    assert not await ledger.revoke_key("key_none")
    admitted = await ledger.admit(ask("t4"))
    assert admitted.verdict == "revoked"
    assert admitted.record is not None
    assert admitted.record.revoked
    found = await ledger.find_key("h1")
    assert found is not None
    assert found.revoked
    assert found.models == ["m"]


async def test_a_static_record_needs_no_stored_key(ledger: Ledger) -> None:
    static = key(id="cfg-ci", secret_hash="hs", rpm=1, static=True)
    given = ask("t1", secret_hash="")
    given.record = static
    assert (await ledger.admit(given)).verdict == "ok"
    again = ask("t2", secret_hash="")
    again.record = static
    assert (await ledger.admit(again)).verdict == "rpm"


async def test_rpm_is_a_sliding_minute_with_retry_after(ledger: Ledger) -> None:
    await ledger.create_key(key(rpm=2))
    assert (await ledger.admit(ask("t1", now=NOW))).verdict == "ok"
    assert (await ledger.admit(ask("t2", now=NOW + 20))).verdict == "ok"
    refused = await ledger.admit(ask("t3", now=NOW + 30))
    assert refused.verdict == "rpm"
    assert refused.retry_after_s == pytest.approx(30, abs=0.01)
    assert (await ledger.admit(ask("t4", now=NOW + 60.5))).verdict == "ok"  # t1 left


async def test_tpm_counts_settled_tokens(ledger: Ledger) -> None:
    await ledger.create_key(key(tpm=100))
    first = await ledger.admit(ask("t1", tokens=500))  # alone, never refused for its size
    assert first.verdict == "ok"
    await ledger.settle(charge("t1", 0, 0, tokens=(60, 30)))
    assert (await ledger.admit(ask("t2", now=NOW + 1, tokens=10))).verdict == "ok"
    refused = await ledger.admit(ask("t3", now=NOW + 2, tokens=11))
    assert refused.verdict == "tpm"
    assert refused.retry_after_s == pytest.approx(58, abs=0.01)
    assert (await ledger.admit(ask("t4", now=NOW + 61, tokens=11))).verdict == "ok"


async def test_budget_reserve_settle_release(ledger: Ledger) -> None:
    await ledger.create_key(key(budget_nanos=1000))
    a = await ledger.admit(ask("a", reserve=600))
    assert a.verdict == "ok"
    assert a.reserved_nanos == 600
    assert a.window == "total"
    assert (await ledger.admit(ask("b", reserve=500))).verdict == "budget"  # 600 held
    await ledger.release("key_1", "a", 600)
    b = await ledger.admit(ask("b", reserve=500))
    assert b.verdict == "ok"
    await ledger.settle(charge("b", 300, 500))
    spend = await ledger.key_spend("key_1", "total", NOW)
    assert (spend.total_nanos, spend.window_nanos, spend.reserved_nanos) == (300, 300, 0)
    assert (await ledger.admit(ask("c", reserve=700))).verdict == "ok"
    assert (await ledger.admit(ask("d", reserve=1))).verdict == "budget"


async def test_a_dead_reservation_expires(ledger: Ledger) -> None:
    await ledger.create_key(key(budget_nanos=1000))
    assert (await ledger.admit(ask("a", reserve=1000, hold_s=30))).verdict == "ok"
    assert (await ledger.admit(ask("b", now=NOW + 29, reserve=1))).verdict == "budget"
    assert (await ledger.admit(ask("c", now=NOW + 31, reserve=1000))).verdict == "ok"


async def test_daily_budget_starts_again_each_day(ledger: Ledger) -> None:
    await ledger.create_key(key(budget_nanos=100, budget_period="daily"))
    today = await ledger.admit(ask("a", reserve=100))
    assert today.window == budget_windows(NOW)["daily"]
    await ledger.settle(charge("a", 100, 100, window=today.window))
    assert (await ledger.admit(ask("b", reserve=1))).verdict == "budget"
    tomorrow = NOW + 86400
    assert (await ledger.admit(ask("c", now=tomorrow, reserve=100))).verdict == "ok"
    spend = await ledger.key_spend("key_1", budget_windows(tomorrow)["daily"], tomorrow)
    assert (spend.total_nanos, spend.window_nanos) == (100, 0)


async def test_spend_per_key_and_model(ledger: Ledger) -> None:
    await ledger.settle(charge("", 7, 0, key_id="", tokens=(3, 4)))
    await ledger.settle(charge("", 5, 0, key_id="", tokens=(1, 1)))
    await ledger.settle(charge("x", 11, 0, tokens=(2, 2)))
    rows = {(r.key_id, r.model): r for r in await ledger.spend()}
    assert rows[("", "up/m")].cost_nanos == 12
    assert rows[("", "up/m")].requests == 2
    assert rows[("", "up/m")].input_tokens == 4
    assert rows[("", "up/m")].output_tokens == 5
    assert rows[("key_1", "up/m")].cost_nanos == 11


async def test_cache_hits_are_counted_beside_the_spend(backend: Callable[[], Ledger]) -> None:
    """Hits add to their own counters, never to cost or requests; a pair with hits only
    still gets a row; two processes (workers) sharing the store add up."""
    first, second = backend(), backend()
    try:
        await first.settle(charge("x", 11, 0, tokens=(2, 2)))
        hit = CacheHits(key_id="key_1", model="up/m", hits=2, saved_nanos=22)
        await first.count_hits([hit])
        await second.count_hits(
            [
                CacheHits(key_id="key_1", model="up/m", hits=1, saved_nanos=11),
                CacheHits(key_id="", model="other", hits=3, saved_nanos=0),
            ]
        )
        rows = {(r.key_id, r.model): r for r in await first.spend()}
        if isinstance(first, MemoryLedger):  # its counts are its own process's
            assert (
                rows[("key_1", "up/m")].cache_hits,
                rows[("key_1", "up/m")].cache_saved_nanos,
            ) == (2, 22)
            return
        mine = rows[("key_1", "up/m")]
        assert (mine.cost_nanos, mine.requests) == (11, 1)
        assert (mine.cache_hits, mine.cache_saved_nanos) == (3, 33)
        anonymous = rows[("", "other")]
        assert (anonymous.requests, anonymous.cost_nanos, anonymous.cache_hits) == (0, 0, 3)
    finally:
        await first.close()
        await second.close()


async def test_keys_are_listed_in_creation_order(ledger: Ledger) -> None:
    await ledger.create_key(key(id="key_b", secret_hash="hb", created_at=NOW + 1))
    await ledger.create_key(key(id="key_a", secret_hash="ha", created_at=NOW))
    assert [r.id for r in await ledger.list_keys()] == ["key_a", "key_b"]
    assert await ledger.get_key("key_zz") is None


async def test_concurrent_admissions_never_overshoot(backend: Callable[[], Ledger]) -> None:
    """Two ledgers on one store (two processes' worth) race 60 admissions for a budget of
    ten reservations: exactly ten win."""
    first = backend()
    # memory is per process: there the tasks share one ledger
    second = first if isinstance(first, MemoryLedger) else backend()
    try:
        await first.create_key(key(budget_nanos=1000))
        results = await asyncio.gather(
            *((first if i % 2 else second).admit(ask(f"t{i}", reserve=100)) for i in range(60))
        )
        assert sum(r.verdict == "ok" for r in results) == 10
        spend = await first.key_spend("key_1", "total", NOW)
        assert spend.reserved_nanos == 1000
    finally:
        await first.close()
        if second is not first:
            await second.close()
