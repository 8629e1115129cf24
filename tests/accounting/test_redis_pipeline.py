"""The redis ledger sends the admissions and settles of one loop turn in one pipeline, in
arrival order, and loads its scripts again when the server lost them."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.store import redis_batch
from gateway.store.redis_ledger import RedisLedger
from tests.accounting.test_ledger_contract import NOW
from tests.accounting.test_ledger_contract import ask
from tests.accounting.test_ledger_contract import charge
from tests.accounting.test_ledger_contract import key
from tests.redis_server import RedisServer


@pytest.fixture
async def direct(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url())
    await client.flushdb()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
async def ledger(redis_server: RedisServer, direct: aioredis.Redis) -> AsyncIterator[RedisLedger]:
    store = RedisLedger(redis_server.url())
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
    await ledger.admit(ask("warm", secret_hash="nobody"))
    await ledger.admit(ask("warm"))  # the server loads the scripts; the key's id is known
    await ledger.release("key_1", "warm", 0)
    await ledger.settle(charge("warm", 0, 0, key_id=""))
    sizes: list[int] = []
    exchange = redis_batch._exchange

    async def counted(conn: Any, commands: list[bytes]) -> list[Any]:
        sizes.append(len(commands))
        return await exchange(conn, commands)

    monkeypatch.setattr(redis_batch, "_exchange", counted)
    answers = await asyncio.gather(*(ledger.admit(ask(f"t{i}", reserve=100)) for i in range(20)))
    assert sizes == [20]
    assert [a.verdict for a in answers] == ["ok"] * 10 + ["budget"] * 10
    settles = [ledger.settle(charge(f"t{i}", 50, 100)) for i in range(9)]
    await asyncio.gather(*settles, ledger.release("key_1", "t9", 100))
    assert sizes == [20, 10]  # settles and a release share the turn's pipeline
    spent = await ledger.key_spend("key_1", "total", NOW)
    assert (spent.total_nanos, spent.reserved_nanos) == (450, 0)


async def test_scripts_lost_by_the_server_are_loaded_again(
    ledger: RedisLedger, direct: aioredis.Redis
) -> None:
    await ledger.create_key(key(budget_nanos=1000))
    assert (await ledger.admit(ask("t1", reserve=100))).verdict == "ok"
    await direct.script_flush()  # as after a restart without persistence
    answers = await asyncio.gather(
        ledger.admit(ask("t2", reserve=100)), ledger.settle(charge("t1", 60, 100))
    )
    assert answers[0].verdict == "ok"
    spent = await ledger.key_spend("key_1", "total", NOW)
    assert (spent.total_nanos, spent.reserved_nanos) == (60, 100)
    await direct.script_flush()
    assert (await ledger.admit(ask("t3", reserve=100))).verdict == "ok"  # a call alone
    assert (await ledger.key_spend("key_1", "total", NOW)).reserved_nanos == 200
