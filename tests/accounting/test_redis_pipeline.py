"""The redis ledger sends the admissions and settles of one loop turn in one pipeline, in
arrival order, and loads its scripts again when the server lost them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio.client import Pipeline

from gateway.store.redis_ledger import RedisLedger
from tests.accounting.test_ledger_contract import NOW
from tests.accounting.test_ledger_contract import ask
from tests.accounting.test_ledger_contract import charge
from tests.accounting.test_ledger_contract import key
from tests.redis_server import RedisServer


@pytest.fixture
async def ledger(redis_server: RedisServer) -> Any:
    store = RedisLedger(redis_server.url())
    await store._client.flushdb()
    try:
        yield store
    finally:
        await store.close()


async def test_one_loop_turn_is_one_round_trip_in_arrival_order(
    ledger: RedisLedger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """20 admissions of 100 against a budget of 1,000 made at once: one pipeline, and the
    first ten in arrival order are admitted, as they would be one by one."""
    await ledger.create_key(key(budget_nanos=1000))
    await ledger.admit(ask("warm", secret_hash="nobody"))  # the server loads the scripts
    await ledger.settle(charge("warm", 0, 0, key_id=""))
    sizes: list[int] = []
    execute = Pipeline.execute

    async def counted(self: Pipeline, raise_on_error: bool = True) -> list[Any]:
        sizes.append(len(self.command_stack))
        return await execute(self, raise_on_error=raise_on_error)

    monkeypatch.setattr(Pipeline, "execute", counted)
    answers = await asyncio.gather(*(ledger.admit(ask(f"t{i}", reserve=100)) for i in range(20)))
    assert sizes == [20]
    assert [a.verdict for a in answers] == ["ok"] * 10 + ["budget"] * 10
    await asyncio.gather(*(ledger.settle(charge(f"t{i}", 50, 100)) for i in range(10)))
    assert sizes == [20, 10]
    spent = await ledger.key_spend("key_1", "total", NOW)
    assert (spent.total_nanos, spent.reserved_nanos) == (500, 0)


async def test_scripts_lost_by_the_server_are_loaded_again(ledger: RedisLedger) -> None:
    await ledger.create_key(key(budget_nanos=1000))
    assert (await ledger.admit(ask("t1", reserve=100))).verdict == "ok"
    await ledger._client.script_flush()  # as after a restart without persistence
    answers = await asyncio.gather(
        ledger.admit(ask("t2", reserve=100)), ledger.settle(charge("t1", 60, 100))
    )
    assert answers[0].verdict == "ok"
    spent = await ledger.key_spend("key_1", "total", NOW)
    assert (spent.total_nanos, spent.reserved_nanos) == (60, 100)
    await ledger._client.script_flush()
    assert (await ledger.admit(ask("t3", reserve=100))).verdict == "ok"  # a call alone
    assert (await ledger.key_spend("key_1", "total", NOW)).reserved_nanos == 200
