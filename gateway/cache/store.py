"""Where entries live: this process's memory (bounded by bytes, least recently used first
out), a sqlite file (the embedded default: a table of its own, expiry by the wall clock and
bounded by bytes, sqlite_store.py), or redis through the gateway's key-value store (expiry by
redis, shared by every replica; its bound is redis's own `maxmemory`).

A store that fails raises `StoreError` (gateway/store/kv.py); the cache turns that into a
miss (service.py), never into the request's error.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Protocol

from gateway.cache.config import CacheConfig
from gateway.cache.sqlite_store import SqliteCacheStore
from gateway.store.kv import KeyValueStore
from gateway.store.kv import make_kv
from gateway.store.kv import sqlite_path

KEY_PREFIX = "cache:"


class CacheStore(Protocol):
    async def get(self, key: str) -> bytes | None: ...

    async def put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def close(self) -> None: ...


class MemoryCacheStore:
    """In-process LRU bounded by the bytes of its values (`max_bytes`)."""

    def __init__(self, max_bytes: int) -> None:
        self._data: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._max = max_bytes
        self.bytes = 0

    async def get(self, key: str) -> bytes | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= time.monotonic():
            self._drop(key)
            return None
        self._data.move_to_end(key)
        return value

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        if ttl_s <= 0 or len(value) > self._max:
            return
        self._drop(key)
        self._data[key] = (time.monotonic() + ttl_s, value)
        self.bytes += len(value)
        while self.bytes > self._max:
            self._drop(next(iter(self._data)))

    def _drop(self, key: str) -> None:
        entry = self._data.pop(key, None)
        if entry is not None:
            self.bytes -= len(entry[1])

    def __len__(self) -> int:
        return len(self._data)

    async def close(self) -> None:
        self._data.clear()
        self.bytes = 0


class KVCacheStore:
    """Entries in a `KeyValueStore` under `cache:<key>`; `owned`: this store opened it (and
    closes it), rather than sharing the gateway's own."""

    def __init__(self, kv: KeyValueStore, owned: bool) -> None:
        self._kv = kv
        self._owned = owned

    async def get(self, key: str) -> bytes | None:
        return await self._kv.get(KEY_PREFIX + key)

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._kv.put(KEY_PREFIX + key, value, ttl_s)

    async def close(self) -> None:
        if self._owned:
            await self._kv.close()


def make_store(config: CacheConfig, store_url: str, shared: KeyValueStore) -> CacheStore:
    """The store of a validated `cache` section; `shared` is the gateway's own key-value
    store (`store.url`), used when the cache names no URL of its own."""
    if config.store == "memory":
        return MemoryCacheStore(config.max_bytes)
    url = config.url or store_url
    if config.store == "sqlite":
        return SqliteCacheStore(sqlite_path(url), config.max_bytes)
    if url == store_url:
        return KVCacheStore(shared, owned=False)
    return KVCacheStore(make_kv(url), owned=True)
