"""A single redis server written by the gateway before its keys were hash-tagged is moved to
the new names on first use, once, and everything it held is honored: keys, revocations,
spend, usage, reservations (gateway/store/redis_migrate.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from gateway.store.ledger import make_ledger
from gateway.store.ledger import record_encoder
from tests.accounting.test_ledger_contract import NOW
from tests.accounting.test_ledger_contract import ask
from tests.accounting.test_ledger_contract import key
from tests.redis_server import RedisServer


@pytest.fixture
async def direct(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url())
    try:
        yield client
    finally:
        await client.aclose()


async def write_old_layout(client: aioredis.Redis) -> None:
    first = key(budget_nanos=1000)
    second = key(id="key_2", secret_hash="h2", created_at=NOW + 1)
    for record in (first, second):
        await client.set(f"gw:vk:{record.id}", record_encoder.encode(record))
        await client.set(f"gw:vkh:{record.secret_hash}", record.id)
        await client.zadd("gw:vkeys", {record.id: record.created_at})
    await client.set("gw:vkr:key_2", b"1")
    await client.hset("gw:sp:key_1", mapping={"total": 500})
    await client.hset("gw:us:key_1", mapping={"up/m\tcost": 500, "up/m\trequests": 2})
    await client.sadd("gw:uskeys", "key_1")
    await client.zadd("gw:rs:key_1", {"t9:100": (NOW + 600) * 1000})
    await client.set("gw:health:other", b"kept")  # not the ledger's: left alone


async def test_old_names_are_moved_once_and_honored(
    redis_server: RedisServer, direct: aioredis.Redis
) -> None:
    await write_old_layout(direct)
    store = make_ledger(redis_server.url())
    try:
        found = await store.find_key("h1")
        assert found is not None
        assert found.budget_nanos == 1000
        assert [r.id for r in await store.list_keys()] == ["key_1", "key_2"]
        spent = await store.key_spend("key_1", "total", NOW)
        assert (spent.total_nanos, spent.reserved_nanos) == (500, 100)
        rows = await store.spend()
        assert [(r.key_id, r.cost_nanos, r.requests) for r in rows] == [("key_1", 500, 2)]
        assert (await store.admit(ask("a", secret_hash="h2"))).verdict == "revoked"
        # 500 spent + 100 held + 401 asked > 1000
        assert (await store.admit(ask("b", reserve=401))).verdict == "budget"
        assert (await store.admit(ask("c", reserve=400))).verdict == "ok"
    finally:
        await store.close()
    names = {k.decode() for k in await direct.keys("*")}
    assert not {n for n in names if n.split(":")[1] in ("vk", "vkr", "sp", "us", "rs")}
    assert "gw:uskeys" not in names
    assert {"gw:{key_1}:vk", "gw:{key_2}:vkr", "gw:health:other"} <= names
    assert await direct.get("gw:layout") == b"2"


async def test_the_move_runs_once_and_never_overwrites(
    redis_server: RedisServer, direct: aioredis.Redis
) -> None:
    await direct.hset("gw:{key_1}:sp", mapping={"total": 7})  # already in the new layout
    await direct.hset("gw:sp:key_1", mapping={"total": 500})
    store = make_ledger(redis_server.url())
    try:
        assert (await store.key_spend("key_1", "total", NOW)).total_nanos == 7
    finally:
        await store.close()
    assert await direct.hget("gw:sp:key_1", "total") == b"500"  # kept, not overwritten
    await direct.hset("gw:sp:key_3", mapping={"total": 9})  # an old-version writer, later
    again = make_ledger(redis_server.url())
    try:
        assert (await again.key_spend("key_3", "total", NOW)).total_nanos == 0
    finally:
        await again.close()
    assert await direct.exists("gw:sp:key_3") == 1  # the layout key says: done once
