"""The sqlite cache store: entries in a table of their own, with expiry and a size bound.

It shares the file (and the worker processes' WAL) of the gateway's sqlite store when
`cache.url` is unset, through a connection and a thread of its own (sqlite_kv.SqliteKV's), so
a slow cache write never queues behind the ledger's. Expired rows are invisible at once and
deleted a batch at a time by each put; the table's bytes are kept in a one-row total, updated
in the put's transaction, and a put that takes the total past `max_bytes` evicts the entries
that would expire first until it fits (every process sees one total: the bound holds for the
file, not per process).
"""

from __future__ import annotations

import sqlite3
import time

from gateway.store.sqlite_kv import PURGE_BATCH
from gateway.store.sqlite_kv import SqliteKV
from gateway.store.sqlite_kv import transaction

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS response_cache ("
    " key TEXT PRIMARY KEY, value BLOB NOT NULL, size INTEGER NOT NULL,"
    " expires_at REAL NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS response_cache_expires_at ON response_cache (expires_at)",
    "CREATE TABLE IF NOT EXISTS response_cache_total (one INTEGER PRIMARY KEY CHECK (one = 1),"
    " bytes INTEGER NOT NULL)",
    "INSERT OR IGNORE INTO response_cache_total (one, bytes) VALUES (1, 0)",
)
_GET = "SELECT value FROM response_cache WHERE key = ? AND expires_at > ?"
_SIZE_OF = "SELECT size FROM response_cache WHERE key = ?"
_UPSERT = (
    "INSERT INTO response_cache (key, value, size, expires_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value, size = excluded.size,"
    " expires_at = excluded.expires_at"
)
_ADD = "UPDATE response_cache_total SET bytes = bytes + ? WHERE one = 1"
_TOTAL = "SELECT bytes FROM response_cache_total WHERE one = 1"
_EXPIRED = "SELECT key, size FROM response_cache WHERE expires_at <= ? LIMIT ?"
_SOONEST = "SELECT key, size FROM response_cache ORDER BY expires_at LIMIT ?"
_DELETE = "DELETE FROM response_cache WHERE key = ?"


class SqliteCacheStore:
    """A CacheStore in the sqlite database at `path`, bounded by `max_bytes` of values."""

    def __init__(self, path: str, max_bytes: int) -> None:
        self._db = SqliteKV(path)  # its thread and connection, not its kv table's methods
        self._max = max_bytes
        self._ready = False

    async def get(self, key: str) -> bytes | None:
        now = time.time()
        return await self._db.run(lambda conn: self._get(conn, key, now))

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        now = time.time()
        await self._db.run(lambda conn: self._put(conn, key, value, now + ttl_s, now))

    async def total_bytes(self) -> int:
        return await self._db.run(lambda conn: self._total(conn))

    async def close(self) -> None:
        await self._db.close()

    def _schema(self, conn: sqlite3.Connection) -> None:
        if not self._ready:
            with transaction(conn):
                for statement in _SCHEMA:
                    conn.execute(statement)
            self._ready = True

    def _get(self, conn: sqlite3.Connection, key: str, now: float) -> bytes | None:
        self._schema(conn)
        found = conn.execute(_GET, (key, now)).fetchone()
        return None if found is None else bytes(found[0])

    def _total(self, conn: sqlite3.Connection) -> int:
        self._schema(conn)
        return int(conn.execute(_TOTAL).fetchone()[0])

    def _put(
        self, conn: sqlite3.Connection, key: str, value: bytes, expires_at: float, now: float
    ) -> None:
        self._schema(conn)
        if len(value) > self._max:
            return
        with transaction(conn):
            _drop(conn, conn.execute(_EXPIRED, (now, PURGE_BATCH)).fetchall())
            old = conn.execute(_SIZE_OF, (key,)).fetchone()
            conn.execute(_UPSERT, (key, value, len(value), expires_at))
            conn.execute(_ADD, (len(value) - (old[0] if old else 0),))
            over = int(conn.execute(_TOTAL).fetchone()[0]) - self._max
            while over > 0:
                rows = [r for r in conn.execute(_SOONEST, (PURGE_BATCH,)) if r[0] != key]
                if not rows:
                    break
                freed = 0
                for row in rows:
                    if freed >= over:
                        break
                    _drop(conn, [row])
                    freed += row[1]
                over -= freed


def _drop(conn: sqlite3.Connection, rows: list[tuple[str, int]]) -> None:
    for key, size in rows:
        conn.execute(_DELETE, (key,))
        conn.execute(_ADD, (-size,))
