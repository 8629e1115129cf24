"""HitTally: response-cache hits reach the ledger's spend rows within its flush delay, at
once on flush(), and a ledger that fails loses only that batch."""

from __future__ import annotations

import asyncio

import pytest

from gateway.accounting.cache_hits import HitTally
from gateway.store.kv import StoreUnavailable
from gateway.store.ledger import CacheHits
from gateway.store.memory_ledger import MemoryLedger


async def rows_of(ledger: MemoryLedger) -> dict[tuple[str, str], tuple[int, int]]:
    return {(r.key_id, r.model): (r.cache_hits, r.cache_saved_nanos) for r in await ledger.spend()}


async def test_hits_reach_the_ledger_after_the_delay_in_one_call() -> None:
    ledger = MemoryLedger()
    calls: list[list[CacheHits]] = []
    real = ledger.count_hits

    async def counting(hits: list[CacheHits]) -> None:
        calls.append(hits)
        await real(hits)

    ledger.count_hits = counting  # type: ignore[method-assign]
    tally = HitTally(ledger, flush_after_s=0.05)
    for _ in range(3):
        tally.note("key_1", "m", 10)
    tally.note("", "m", 0)
    assert await rows_of(ledger) == {}  # not yet
    await asyncio.sleep(0.2)
    assert await rows_of(ledger) == {("key_1", "m"): (3, 30), ("", "m"): (1, 0)}
    assert len(calls) == 1
    tally.note("key_1", "m", 5)
    await tally.flush()  # at once (the admin route, shutdown)
    assert (await rows_of(ledger))[("key_1", "m")] == (4, 35)
    await asyncio.sleep(0.1)
    assert len(calls) == 2  # the cancelled timer wrote nothing more


async def test_a_failing_ledger_loses_that_batch_only(caplog: pytest.LogCaptureFixture) -> None:
    ledger = MemoryLedger()
    real = ledger.count_hits
    failing = True

    async def flaky(hits: list[CacheHits]) -> None:
        if failing:
            raise StoreUnavailable("down")
        await real(hits)

    ledger.count_hits = flaky  # type: ignore[method-assign]
    tally = HitTally(ledger, flush_after_s=10)
    tally.note("key_1", "m", 1)
    await tally.flush()
    assert "1 hits not counted" in caplog.text
    failing = False
    tally.note("key_1", "m", 2)
    await tally.flush()
    assert await rows_of(ledger) == {("key_1", "m"): (1, 2)}
