"""The stores and the stored answer: the memory LRU's byte bound, expiry, sqlite on a real
file and redis on a real server (shared by two clients), compression, and a store that fails
being a miss."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

from gateway.cache import entry as entries
from gateway.cache.build import build_cache
from gateway.cache.config import CacheConfig
from gateway.cache.entry import CachedAnswer
from gateway.cache.entry import CachedCall
from gateway.cache.service import ResponseCache
from gateway.cache.sqlite_store import SqliteCacheStore
from gateway.cache.store import KVCacheStore
from gateway.cache.store import MemoryCacheStore
from gateway.cache.store import make_store
from gateway.config import parse_config
from gateway.store.kv import MemoryKV
from gateway.store.kv import StoreUnavailable
from gateway.store.redis_kv import RedisKV
from gateway.wire.openai_chat import Usage
from tests.redis_server import RedisServer
from tests.redis_server import redis_server

__all__ = ["redis_server"]

ANSWER = CachedAnswer(
    finish_reason="tool_calls",
    content="Let me look.",
    reasoning="thinking",
    tool_calls=[
        CachedCall("call_1", "get_weather", '{"city": "Paris"}'),
        CachedCall("c2", "now", "{}"),
    ],
    usage=Usage(prompt_tokens=10, completion_tokens=5, total_tokens=15),
    model="up-model",
    cost_nanos=1234,
)


def test_entries_round_trip_and_large_ones_are_compressed() -> None:
    small = entries.encode(ANSWER)
    assert small[:1] == b"j"
    assert entries.decode(small) == ANSWER
    large = CachedAnswer(finish_reason="stop", content="word " * 10_000)
    data = entries.encode(large)
    assert data[:1] == b"z"
    assert len(data) < 2_000
    assert entries.decode(data) == large
    assert entries.decode(b"x-not-an-entry") is None
    assert entries.decode(b"z" + b"garbage") is None


async def test_memory_store_is_bounded_by_bytes_least_recently_used_first() -> None:
    store = MemoryCacheStore(max_bytes=300)
    for name in "abc":
        await store.put(name, b"x" * 100, 60)
    assert await store.get("a") is not None  # a is now the most recent
    await store.put("d", b"x" * 100, 60)
    assert await store.get("b") is None  # the least recently used went
    assert await store.get("a") is not None
    assert store.bytes <= 300
    await store.put("huge", b"x" * 301, 60)  # larger than the whole bound: not kept
    assert await store.get("huge") is None


async def test_memory_store_expires() -> None:
    store = MemoryCacheStore(max_bytes=1000)
    await store.put("k", b"v", 0.05)
    assert await store.get("k") == b"v"
    await asyncio.sleep(0.08)
    assert await store.get("k") is None
    assert store.bytes == 0


async def test_sqlite_store_on_a_real_file(tmp_path: Path) -> None:
    path = tmp_path / "cache.db"
    one = SqliteCacheStore(str(path), 1_000_000)
    two = SqliteCacheStore(str(path), 1_000_000)  # another worker of this machine
    try:
        await one.put("k", entries.encode(ANSWER), 60)
        raw = await two.get("k")
        assert raw is not None
        assert entries.decode(raw) == ANSWER
        await one.put("short", b"j{}", 0.05)
        await asyncio.sleep(0.08)
        assert await two.get("short") is None
    finally:
        await one.close()
        await two.close()


async def test_sqlite_store_is_bounded_by_bytes_across_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "cache.db")
    one, two = SqliteCacheStore(path, 10_000), SqliteCacheStore(path, 10_000)
    try:
        for i in range(30):  # 30 KB into a 10 KB bound, from two connections
            store = one if i % 2 else two
            await store.put(f"k{i}", bytes([i]) * 1000, 60 + i)  # later puts expire later
        total = await one.total_bytes()
        assert 9_000 <= total <= 10_000
        assert await one.get("k29") == bytes([29]) * 1000  # the newest stays
        assert await two.get("k0") is None  # the soonest to expire went first
        await one.put("k29", b"x" * 10, 60)  # a smaller value: the total follows
        assert await two.total_bytes() == total - 990
        await one.put("huge", b"x" * 10_001, 60)  # larger than the bound: not kept
        assert await one.get("huge") is None
        await one.put("gone", b"x" * 100, 0.01)
        await asyncio.sleep(0.03)
        await one.put("next", b"y", 60)  # purges what expired
        assert await one.get("gone") is None
        rows = sqlite3.connect(path).execute("SELECT count(*) FROM response_cache").fetchone()
        assert rows[0] <= 11
    finally:
        await one.close()
        await two.close()


async def test_redis_store_is_shared_and_expires(redis_server: RedisServer) -> None:
    one = KVCacheStore(RedisKV(redis_server.url()), owned=True)
    two = KVCacheStore(RedisKV(redis_server.url()), owned=True)  # another replica
    try:
        await one.put("k", entries.encode(ANSWER), 60)
        raw = await two.get("k")
        assert raw is not None
        assert entries.decode(raw) == ANSWER
        await one.put("short", b"j{}", 0.05)
        await asyncio.sleep(0.1)
        assert await two.get("short") is None
    finally:
        await one.close()
        await two.close()


def test_make_store_shares_the_gateway_store_unless_told_otherwise(tmp_path: Path) -> None:
    shared = MemoryKV()
    assert isinstance(
        make_store(CacheConfig(store="memory"), "memory://", shared), MemoryCacheStore
    )
    url = f"sqlite:///{tmp_path}/gw.db"
    same = make_store(CacheConfig(store="sqlite"), url, shared)
    assert isinstance(same, SqliteCacheStore)  # the gateway's file, a table of its own
    assert same._db.path == f"{tmp_path}/gw.db"
    own = make_store(CacheConfig(store="sqlite", url=f"sqlite:///{tmp_path}/c.db"), url, shared)
    assert isinstance(own, SqliteCacheStore)
    assert own._db.path == f"{tmp_path}/c.db"
    redis = "redis://127.0.0.1:1/0"
    on_redis = make_store(CacheConfig(store="redis"), redis, shared)
    assert isinstance(on_redis, KVCacheStore)
    assert on_redis._kv is shared


def test_build_cache_only_when_some_model_caches() -> None:
    base = """
store: {url: "memory://"}
providers: [{name: m, kind: mock}]
models:
  - {name: a, targets: [{provider: m, model: mock}]}
"""
    assert build_cache(parse_config(base, {}), MemoryKV()) is None
    on = parse_config(base + "cache: {mode: exact, store: memory}\n", {})
    assert build_cache(on, MemoryKV()) is not None


class FailingStore:
    async def get(self, key: str) -> bytes | None:
        raise StoreUnavailable("down")

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        raise StoreUnavailable("down")

    async def close(self) -> None:
        return None


async def test_a_failing_store_is_a_miss_and_keeps_nothing() -> None:
    cache = ResponseCache(CacheConfig(mode="exact", store="memory"), {}, FailingStore())
    args: dict[str, Any] = {
        "api": "chat",
        "namespace": "n",
        "model": "m",
        "targets": [],
        "native": None,
    }
    lookup = await cache.lookup({}, chat={"messages": []}, **args)
    assert lookup.result == "miss"
    await cache.finish(lookup, ANSWER)  # the put fails: logged, not raised


async def test_a_dead_redis_is_a_miss(redis_server: RedisServer) -> None:
    store = KVCacheStore(RedisKV(redis_server.url()), owned=True)
    cache = ResponseCache(CacheConfig(mode="exact", store="redis"), {}, store)
    args: dict[str, Any] = {
        "api": "chat",
        "namespace": "n",
        "model": "m",
        "targets": [],
        "native": None,
    }
    first = await cache.lookup({}, chat={"messages": []}, **args)
    await cache.finish(first, ANSWER)
    hit = await cache.lookup({}, chat={"messages": []}, **args)
    assert hit.result == "hit"
    redis_server.stop()
    try:
        missed = await asyncio.wait_for(
            cache.lookup({}, chat={"messages": []}, **args),
            10,
        )
        assert missed.result == "miss"
        await cache.finish(missed, ANSWER)
    finally:
        await cache.close()
