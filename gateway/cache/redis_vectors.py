"""Semantic mode's index in redis, beside the entries (`cache.store: redis`), shared by
every replica and searched in each one's process with numpy (vectors.Mirror).

    gw:cv:{<bucket>}:rows   hash: entry key -> expires_at (8 bytes, little-endian double)
                            and the vector (float32)
    gw:cv:{<bucket>}:added  sorted set: entry key, scored by when it was added
    gw:cv:all               sorted set: `<bucket> <key>`, scored by when it was added: the
                            bound (`max_entries` in all, the oldest out first), checked every
                            PRUNE_EVERY additions of a process

Every command names one key, so a Redis Cluster serves it as well as one server. A bucket's
keys expire with its longest-lived vector; a vector's own expiry is read from its row. A
redis that fails raises StoreUnavailable: the search is a miss, the vector not kept.
"""

from __future__ import annotations

import math
import struct
import time
from typing import cast

from redis.asyncio import Redis
from redis.asyncio import RedisCluster
from redis.exceptions import RedisError

from gateway.cache.semantic import Matrix
from gateway.cache.semantic import to_bytes
from gateway.cache.vectors import PRUNE_EVERY
from gateway.cache.vectors import Found
from gateway.cache.vectors import Mirror
from gateway.cache.vectors import Row
from gateway.store.kv import StoreUnavailable
from gateway.store.redis_conn import KEY_PREFIX
from gateway.store.redis_conn import client_for
from gateway.store.redis_conn import close_client
from gateway.store.redis_url import redacted

ALL = KEY_PREFIX + "cv:all"
_EXPIRES = struct.Struct("<d")


def _names(bucket: str) -> tuple[str, str]:
    tag = f"{KEY_PREFIX}cv:{{{bucket}}}:"
    return tag + "rows", tag + "added"


class RedisVectorIndex:
    def __init__(self, url: str, max_entries: int) -> None:
        self._where = redacted(url)
        self._client: Redis | RedisCluster = client_for(url)
        self._max = max_entries
        self._mirror = Mirror(max_entries)
        self._adds = 0

    async def search(self, bucket: str, query: Matrix) -> Found | None:
        rows_key, added_key = _names(bucket)
        now = time.time()
        try:
            added = await self._client.zrangebyscore(
                added_key, self._mirror.since(bucket), "+inf", withscores=True
            )
            pairs = cast("list[tuple[bytes, float]]", added)
            values = await self._client.hmget(rows_key, [k for k, _ in pairs]) if pairs else []
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        rows: list[Row] = []
        for (key, added_at), value in zip(pairs, cast("list[bytes | None]", values), strict=True):
            if value is None or len(value) <= _EXPIRES.size:
                continue  # pruned between the two reads
            (expires_at,) = _EXPIRES.unpack_from(value)
            if expires_at > now:
                rows.append((key.decode(), value[_EXPIRES.size :], expires_at, added_at))
        await self._mirror.merge(bucket, rows, now)
        return await self._mirror.index.search(bucket, query)

    async def add(self, bucket: str, key: str, vector: Matrix, ttl_s: float) -> None:
        rows_key, added_key = _names(bucket)
        now = time.time()
        ttl_ms = max(1, math.ceil(ttl_s * 1000))
        value = _EXPIRES.pack(now + ttl_s) + to_bytes(vector)
        client = self._client
        try:
            await client.hset(rows_key, key, value)
            await client.zadd(added_key, {key: now})
            for name in (rows_key, added_key):
                # a bucket lives as long as its longest-lived vector (NX: a new key; GT: later)
                await client.pexpire(name, ttl_ms, nx=True)
                await client.pexpire(name, ttl_ms, gt=True)
            await client.zadd(ALL, {f"{bucket} {key}": now})
            self._adds += 1
            if self._adds % PRUNE_EVERY == 1 or self._max <= PRUNE_EVERY:
                await self._prune()
        except (RedisError, OSError) as exc:
            raise self._unavailable(exc) from exc
        await self._mirror.index.add(bucket, key, vector, ttl_s)

    async def _prune(self) -> None:
        client = self._client
        over = int(await client.zcard(ALL)) - self._max
        if over <= 0:
            return
        for member, _ in cast("list[tuple[bytes, float]]", await client.zpopmin(ALL, over)):
            bucket, _, key = member.decode().partition(" ")
            rows_key, added_key = _names(bucket)
            await client.hdel(rows_key, key)
            await client.zrem(added_key, key)

    async def drop(self, key: str) -> None:
        # this process's copy: the row goes with the bound or its bucket's expiry
        await self._mirror.index.drop(key)

    async def close(self) -> None:
        await self._mirror.index.close()
        await close_client(self._client)

    def _unavailable(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"redis store {self._where}: {type(exc).__name__}: {exc}")
