"""Semantic mode's index: the unit vectors of stored prompts, by bucket (a namespace and a
context, semantic.context_key), each naming the exact entry it leads to. It lives with the
entries: in this process's memory for `store: memory`, in a table of the sqlite file for
`store: sqlite` (so every worker and a restarted gateway search the same vectors). Bounded
by `max_entries` vectors in all (sqlite: checked every PRUNE_EVERY additions), oldest
out first; a vector expires with its entry, and one
whose entry is gone (evicted first) is dropped when a search finds it.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import OrderedDict
from typing import Protocol

import numpy as np

from gateway.cache.config import CacheConfig
from gateway.cache.semantic import Matrix
from gateway.cache.semantic import from_bytes
from gateway.cache.semantic import nearest
from gateway.cache.semantic import to_bytes
from gateway.store.kv import sqlite_path
from gateway.store.sqlite_kv import SqliteKV
from gateway.store.sqlite_kv import transaction

Found = tuple[str, float]  # the entry's key, the similarity
# the sqlite table's count (a scan) is checked at one addition in this many per process: it
# holds at most max_entries + PRUNE_EVERY x processes rows between two checks
PRUNE_EVERY = 64
# a bucket this large (floats) is compared on a thread: ~0.2 ms and more on the event loop
OFF_LOOP_AT = 1_000_000


class VectorIndex(Protocol):
    async def search(self, bucket: str, query: Matrix) -> Found | None: ...

    async def add(self, bucket: str, key: str, vector: Matrix, ttl_s: float) -> None: ...

    async def drop(self, key: str) -> None: ...

    async def close(self) -> None: ...


class _Bucket:
    __slots__ = ("matrix", "rows")

    def __init__(self) -> None:
        self.rows: dict[str, tuple[Matrix, float]] = {}  # key -> (vector, monotonic expiry)
        self.matrix: tuple[list[str], Matrix] | None = None  # rebuilt after a change


class MemoryVectorIndex:
    """In-process, for the memory store (whose entries are this process's too)."""

    def __init__(self, max_entries: int) -> None:
        self._max = max_entries
        self._buckets: dict[str, _Bucket] = {}
        self._order: OrderedDict[str, str] = OrderedDict()  # key -> bucket, oldest first

    def __len__(self) -> int:
        return len(self._order)

    async def search(self, bucket: str, query: Matrix) -> Found | None:
        found = self._buckets.get(bucket)
        if found is None:
            return None
        now = time.monotonic()
        for key in [k for k, (_, expires) in found.rows.items() if expires <= now]:
            self._remove(key)
        if not found.rows:
            return None
        if found.matrix is None:
            keys = list(found.rows)
            found.matrix = keys, np.vstack([found.rows[k][0] for k in keys])
        keys, matrix = found.matrix
        if matrix.size >= OFF_LOOP_AT:  # numpy lets go of the GIL: the loop serves meanwhile
            best = await asyncio.to_thread(nearest, matrix, query)
        else:
            best = nearest(matrix, query)
        return None if best is None else (keys[best[0]], best[1])

    async def add(self, bucket: str, key: str, vector: Matrix, ttl_s: float) -> None:
        self._remove(key)
        target = self._buckets.get(bucket)
        if target is None:
            target = self._buckets[bucket] = _Bucket()
        target.rows[key] = (vector, time.monotonic() + ttl_s)
        target.matrix = None
        self._order[key] = bucket
        while len(self._order) > self._max:
            self._remove(next(iter(self._order)))

    async def drop(self, key: str) -> None:
        self._remove(key)

    def _remove(self, key: str) -> None:
        bucket = self._order.pop(key, None)
        if bucket is None:
            return
        found = self._buckets[bucket]
        found.rows.pop(key, None)
        found.matrix = None
        if not found.rows:
            del self._buckets[bucket]

    async def close(self) -> None:
        self._buckets.clear()
        self._order.clear()


_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS response_cache_vectors ("
    " key TEXT PRIMARY KEY, bucket TEXT NOT NULL, vector BLOB NOT NULL,"
    " expires_at REAL NOT NULL, added_at REAL NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS response_cache_vectors_bucket"
    " ON response_cache_vectors (bucket, added_at)",
    "CREATE INDEX IF NOT EXISTS response_cache_vectors_added ON response_cache_vectors (added_at)",
)
# a bucket's rows added since (>=: a row of the same instant, added after the last read)
_SINCE = (
    "SELECT key, vector, expires_at, added_at FROM response_cache_vectors"
    " WHERE bucket = ? AND added_at >= ? AND expires_at > ?"
)
_UPSERT = (
    "INSERT INTO response_cache_vectors (key, bucket, vector, expires_at, added_at)"
    " VALUES (?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET bucket = excluded.bucket,"
    " vector = excluded.vector, expires_at = excluded.expires_at, added_at = excluded.added_at"
)
_PRUNE_EXPIRED = (
    "DELETE FROM response_cache_vectors WHERE key IN"
    " (SELECT key FROM response_cache_vectors WHERE expires_at <= ? LIMIT 256)"
)
_COUNT = "SELECT count(*) FROM response_cache_vectors"
_PRUNE_OLDEST = (
    "DELETE FROM response_cache_vectors WHERE key IN"
    " (SELECT key FROM response_cache_vectors ORDER BY added_at LIMIT ?)"
)
_DROP = "DELETE FROM response_cache_vectors WHERE key = ?"


Row = tuple[str, bytes, float, float]  # an entry's key, its vector, expires_at, added_at


class Mirror:
    """This process's copy of a shared index's buckets (sqlite's, redis's): what a search
    compares, kept up by reading only the rows added since its last read of the bucket.
    A row another process pruned stays here until its entry is found gone (then dropped) or
    it expires."""

    def __init__(self, max_entries: int) -> None:
        self.index = MemoryVectorIndex(max_entries)
        self._max = max_entries
        # bucket -> the newest added_at read, and the keys read at that instant (a row of
        # the same instant may come later: the next read asks from that instant again)
        self._seen: dict[str, tuple[float, set[str]]] = {}

    def since(self, bucket: str) -> float:
        return self._seen.get(bucket, (0.0, set()))[0]

    async def merge(self, bucket: str, rows: list[Row], now: float) -> None:
        since, known = self._seen.get(bucket, (0.0, set()))
        fresh = [row for row in rows if not (row[3] == since and row[0] in known)]
        if not fresh:
            return
        if len(self._seen) >= self._max:  # buckets are fewer than entries: a reset
            self._seen.clear()
        for key, vector, expires_at, added_at in fresh:
            await self.index.add(bucket, key, from_bytes(vector), expires_at - now)
            if added_at > since:
                since, known = added_at, set()
            if added_at == since:
                known.add(key)
        self._seen[bucket] = (since, known)


class SqliteVectorIndex:
    """In the sqlite file of the entries, mirrored in this process (`Mirror`): a search
    first reads the rows of its bucket added since its last read (every worker's; none,
    usually: one indexed query), then compares in memory."""

    def __init__(self, path: str, max_entries: int) -> None:
        self._db = SqliteKV(path)  # its own connection and thread
        self._max = max_entries
        self._ready = False
        self._mirror = Mirror(max_entries)
        self._adds = 0  # the table's bound is checked every PRUNE_EVERY additions

    async def search(self, bucket: str, query: Matrix) -> Found | None:
        now = time.time()
        since = self._mirror.since(bucket)
        rows = await self._db.run(lambda conn: self._since(conn, bucket, since, now))
        await self._mirror.merge(bucket, [(k, bytes(v), e, a) for k, v, e, a in rows], now)
        return await self._mirror.index.search(bucket, query)

    async def add(self, bucket: str, key: str, vector: Matrix, ttl_s: float) -> None:
        now = time.time()
        row = (key, bucket, to_bytes(vector), now + ttl_s, now)
        self._adds += 1
        bound = self._adds % PRUNE_EVERY == 1 or self._max <= PRUNE_EVERY
        await self._db.run(lambda conn: self._add(conn, row, now, bound))
        await self._mirror.index.add(bucket, key, vector, ttl_s)

    async def drop(self, key: str) -> None:
        await self._mirror.index.drop(key)
        await self._db.run(lambda conn: self._drop(conn, key))

    async def count(self) -> int:
        return await self._db.run(lambda conn: self._count(conn))

    async def close(self) -> None:
        await self._mirror.index.close()
        await self._db.close()

    def _schema(self, conn: sqlite3.Connection) -> None:
        if not self._ready:
            with transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
            self._ready = True

    def _since(
        self, conn: sqlite3.Connection, bucket: str, since: float, now: float
    ) -> list[tuple[str, bytes, float, float]]:
        self._schema(conn)
        return conn.execute(_SINCE, (bucket, since, now)).fetchall()

    def _add(
        self, conn: sqlite3.Connection, row: tuple[object, ...], now: float, bound: bool
    ) -> None:
        self._schema(conn)
        with transaction(conn):
            conn.execute(_UPSERT, row)
            if not bound:
                return
            conn.execute(_PRUNE_EXPIRED, (now,))
            over = int(conn.execute(_COUNT).fetchone()[0]) - self._max
            if over > 0:
                conn.execute(_PRUNE_OLDEST, (over,))

    def _drop(self, conn: sqlite3.Connection, key: str) -> None:
        self._schema(conn)
        with transaction(conn):
            conn.execute(_DROP, (key,))

    def _count(self, conn: sqlite3.Connection) -> int:
        self._schema(conn)
        return int(conn.execute(_COUNT).fetchone()[0])


def make_index(config: CacheConfig, store_url: str, max_entries: int) -> VectorIndex:
    """The index beside a validated cache's entries."""
    if config.store == "memory":
        return MemoryVectorIndex(max_entries)
    url = config.url or store_url
    if config.store == "redis":
        from gateway.cache.redis_vectors import RedisVectorIndex

        return RedisVectorIndex(url, max_entries)
    return SqliteVectorIndex(sqlite_path(url), max_entries)
