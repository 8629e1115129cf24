"""The sqlite backend: one database file shared by the worker processes of one machine.

sqlite3 blocks, so every call runs on one thread this store owns and the event loop only
awaits it; one thread also serialises this process's calls, so one connection is enough.
Processes share the file through WAL (readers do not wait for the writer) and a busy timeout
(a writer waits up to BUSY_TIMEOUT_S for another process's write instead of failing). Writes
run in `BEGIN IMMEDIATE` transactions, which take the write lock before they read: the shape an
atomic read-modify-write (a counter next to get/put) needs as well.

Expiry uses the wall clock, the one clock every process agrees on. Expired rows are invisible
at once (every read compares `expires_at` with now) and deleted lazily: each put also deletes
at most PURGE_BATCH expired rows, so the work of one call stays bounded.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

from gateway.store.kv import StoreUnavailable

T = TypeVar("T")

BUSY_TIMEOUT_S = 5.0
PURGE_BATCH = 64

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS kv ("
    " key TEXT PRIMARY KEY, value BLOB NOT NULL, expires_at REAL NOT NULL) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS kv_expires_at ON kv (expires_at)",
)
_UPSERT = (
    "INSERT INTO kv (key, value, expires_at) VALUES (?, ?, ?)"
    " ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at"
)
_PURGE = "DELETE FROM kv WHERE key IN (SELECT key FROM kv WHERE expires_at <= ? LIMIT ?)"


class SqliteKV:
    """A KeyValueStore in the sqlite database at `path` (absolute, or `:memory:`), created
    with its table when missing. Nothing is opened until the first call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-sqlite")
        self._conn: sqlite3.Connection | None = None  # only ever touched on self._thread
        self._closed = False

    async def get(self, key: str) -> bytes | None:
        now = time.time()
        return await self._run(lambda conn: _get(conn, key, now))

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        now = time.time()
        await self._run(lambda conn: _put(conn, key, value, now + ttl_s, now))

    async def ping(self) -> bool:
        try:
            await self._run(_ping)
        except StoreUnavailable:
            return False
        return True

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # Calls already queued run first: the thread takes its work in order.
        await asyncio.get_running_loop().run_in_executor(self._thread, self._disconnect)
        self._thread.shutdown(wait=False)

    async def run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """`op` on this store's thread and connection (for tables of other modules' own in the
        same file: gateway/cache/sqlite_store.py)."""
        return await self._run(op)

    async def _run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreUnavailable(f"sqlite store {self.path}: closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._call, op)

    def _call(self, op: Callable[[sqlite3.Connection], T]) -> T:
        """On the store's thread: open on first use (again after a failed open), then run."""
        try:
            if self._conn is None:
                self._conn = _connect(self.path)
            return op(self._conn)
        except sqlite3.Error as exc:
            raise StoreUnavailable(f"sqlite store {self.path}: {exc}") from exc

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def use_wal(conn: sqlite3.Connection, within_s: float = BUSY_TIMEOUT_S) -> None:
    """journal_mode = WAL. Switching a new file to WAL takes a lock that sqlite's busy
    handler does not wait for (two workers opening it at once get "database is locked" at
    once), so the switch is tried again here, every 10 ms, for up to `within_s`."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)  # on the store's own thread, at connect only


def _connect(path: str) -> sqlite3.Connection:
    # isolation_level=None: no implicit transactions; ours are explicit (BEGIN IMMEDIATE).
    # timeout= is sqlite's busy timeout: how long to wait for another connection's lock.
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        use_wal(conn)
        # With WAL, NORMAL loses at most the last commits on a power cut, never the file.
        conn.execute("PRAGMA synchronous = NORMAL")
        with transaction(conn):
            for statement in _SCHEMA:
                conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _get(conn: sqlite3.Connection, key: str, now: float) -> bytes | None:
    row = conn.execute("SELECT value FROM kv WHERE key = ? AND expires_at > ?", (key, now))
    found = row.fetchone()
    return None if found is None else bytes(found[0])


def _put(conn: sqlite3.Connection, key: str, value: bytes, expires_at: float, now: float) -> None:
    with transaction(conn):
        if expires_at > now:
            conn.execute(_UPSERT, (key, value, expires_at))
        else:
            conn.execute("DELETE FROM kv WHERE key = ?", (key,))
        conn.execute(_PURGE, (now, PURGE_BATCH))


def _ping(conn: sqlite3.Connection) -> None:
    conn.execute("SELECT 1 FROM kv LIMIT 1").fetchall()
