"""The contract every KeyValueStore backend keeps: one suite, run on memory, sqlite (a file in
tmp_path) and redis (a real redis-server on a loopback port)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from collections.abc import Callable
from pathlib import Path

import pytest

from gateway.store.kv import KeyValueStore
from gateway.store.kv import MemoryKV
from gateway.store.kv import make_kv
from gateway.store.redis_kv import RedisKV
from gateway.store.sqlite_kv import SqliteKV
from tests.redis_server import RedisServer

BACKENDS = ["memory", "sqlite", "redis"]
BINARY = b"\x00head\x00" + bytes(range(256)) + b"\x00"


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[], KeyValueStore]:
    """Makes stores of one backend; every store it makes of a persistent backend sees the same
    data (one file, one redis database), as the workers and replicas of a gateway do."""
    if request.param == "memory":
        return lambda: make_kv("memory://")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path}/gateway.db"
        return lambda: make_kv(url)
    server: RedisServer = request.getfixturevalue("redis_server")
    return lambda: make_kv(server.url())


@pytest.fixture
async def kv(backend: Callable[[], KeyValueStore]) -> AsyncIterator[KeyValueStore]:
    store = backend()
    try:
        yield store
    finally:
        await store.close()


async def test_make_kv_picks_the_backend(
    backend: Callable[[], KeyValueStore], request: pytest.FixtureRequest
) -> None:
    store = backend()
    kinds = {"memory": MemoryKV, "sqlite": SqliteKV, "redis": RedisKV}
    try:
        assert type(store) is kinds[request.node.callspec.params["backend"]]
    finally:
        await store.close()


async def test_missing_key_is_none(kv: KeyValueStore) -> None:
    assert await kv.get("never-written") is None


async def test_put_then_get(kv: KeyValueStore) -> None:
    await kv.put("resp_1", b'{"id":"resp_1"}', 60)
    assert await kv.get("resp_1") == b'{"id":"resp_1"}'
    assert await kv.get("resp_2") is None


async def test_overwrite_replaces_value_and_ttl(kv: KeyValueStore) -> None:
    await kv.put("k", b"first", 0.2)
    await kv.put("k", b"second", 60)
    assert await kv.get("k") == b"second"
    await asyncio.sleep(0.3)
    assert await kv.get("k") == b"second"  # the second put's TTL counts, not the first's


async def test_binary_and_empty_values_round_trip(kv: KeyValueStore) -> None:
    await kv.put("binary", BINARY, 60)
    await kv.put("empty", b"", 60)
    assert await kv.get("binary") == BINARY
    assert await kv.get("empty") == b""  # an empty value is not an absent one


async def test_keys_are_exact(kv: KeyValueStore) -> None:
    await kv.put("caf\u00e9/\u00fc", b"unicode", 60)
    await kv.put("K", b"upper", 60)
    await kv.put("k", b"lower", 60)
    assert await kv.get("caf\u00e9/\u00fc") == b"unicode"
    assert (await kv.get("K"), await kv.get("k")) == (b"upper", b"lower")
    assert await kv.get("k ") is None


async def test_expired_key_is_gone(kv: KeyValueStore) -> None:
    await kv.put("short", b"v", 0.2)
    await kv.put("long", b"v", 60)
    assert await kv.get("short") == b"v"
    await asyncio.sleep(0.35)
    assert await kv.get("short") is None
    assert await kv.get("long") == b"v"


async def test_zero_or_negative_ttl_leaves_key_absent(kv: KeyValueStore) -> None:
    await kv.put("zero", b"v", 0)
    assert await kv.get("zero") is None
    await kv.put("was-there", b"v", 60)
    await kv.put("was-there", b"v", -1)
    assert await kv.get("was-there") is None


async def test_many_concurrent_puts_and_gets(kv: KeyValueStore) -> None:
    keys = [f"key-{i}" for i in range(200)]
    await asyncio.gather(*(kv.put(k, k.encode() * 3, 60) for k in keys))
    values = await asyncio.gather(*(kv.get(k) for k in keys))
    assert values == [k.encode() * 3 for k in keys]
    # Reads and writes of the same keys interleaved: each read sees the old or the new value.
    mixed = await asyncio.gather(*(kv.put(k, b"new", 60) for k in keys), *(kv.get(k) for k in keys))
    assert all(v in (None, b"new", k.encode() * 3) for v, k in zip(mixed[200:], keys, strict=True))
    assert set(await asyncio.gather(*(kv.get(k) for k in keys))) == {b"new"}


async def test_ping_answers(kv: KeyValueStore) -> None:
    assert await kv.ping() is True


async def test_close_is_idempotent_and_persistent_backends_keep_data(
    backend: Callable[[], KeyValueStore], request: pytest.FixtureRequest
) -> None:
    first = backend()
    await first.put("kept", b"v", 60)
    await first.close()
    await first.close()
    second = backend()
    try:
        expected = None if request.node.callspec.params["backend"] == "memory" else b"v"
        assert await second.get("kept") == expected
    finally:
        await second.close()


async def test_two_stores_of_one_url_share_writes(
    backend: Callable[[], KeyValueStore], request: pytest.FixtureRequest
) -> None:
    one, two = backend(), backend()
    try:
        await one.put("shared", b"from one", 60)
        if request.node.callspec.params["backend"] == "memory":
            assert await two.get("shared") is None  # memory:// is private to its store
            return
        assert await two.get("shared") == b"from one"
        await two.put("shared", b"from two", 0.2)
        assert await one.get("shared") == b"from two"
        await asyncio.sleep(0.35)
        assert await one.get("shared") is None
    finally:
        await one.close()
        await two.close()
