"""The sqlite accounting store: one database file shared by the workers of one machine.

Like SqliteKV, every call runs on one thread this store owns, in a `BEGIN IMMEDIATE`
transaction: it takes the database's write lock before it reads, so an admission's checks
and its reservation are one atomic step across all processes using the file, with no
read-modify-write race. WAL with `synchronous = NORMAL`: a commit is in the WAL file before
the call returns, so a settled spend survives a SIGKILL of the process (only a power cut can
lose the last commits). A call returns only after its own commit: the gateway acknowledges
nothing the database does not already hold.

The rpm and tpm windows count per key and second (`rate_seconds`), so an admission reads
at most 60 rows whatever the key's rate; a request leaves the window within a second of
being a minute old.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import TypeVar

import msgspec

from gateway.store.kv import StoreUnavailable
from gateway.store.ledger import (
    WINDOW_S,
    Admission,
    Admitted,
    Charge,
    KeyRecord,
    KeySpend,
    SpendRow,
    judge,
    record_decoder,
    record_encoder,
    window_of,
)

T = TypeVar("T")
BUSY_TIMEOUT_S = 5.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS vkeys (id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL UNIQUE,"
    " record BLOB NOT NULL, created_at REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS reservations (ticket TEXT PRIMARY KEY, key_id TEXT NOT NULL,"
    " nanos INTEGER NOT NULL, expires_at REAL NOT NULL)",
    "CREATE INDEX IF NOT EXISTS reservations_key ON reservations (key_id, expires_at)",
    "CREATE TABLE IF NOT EXISTS rate_seconds (key_id TEXT NOT NULL, second INTEGER NOT NULL,"
    " requests INTEGER NOT NULL, tokens INTEGER NOT NULL,"
    " PRIMARY KEY (key_id, second)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS key_spend (key_id TEXT NOT NULL, window TEXT NOT NULL,"
    " nanos INTEGER NOT NULL, PRIMARY KEY (key_id, window)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS usage (key_id TEXT NOT NULL, model TEXT NOT NULL,"
    " nanos INTEGER NOT NULL, requests INTEGER NOT NULL, input_tokens INTEGER NOT NULL,"
    " output_tokens INTEGER NOT NULL, estimated INTEGER NOT NULL,"
    " PRIMARY KEY (key_id, model)) WITHOUT ROWID",
)
_ADD_SPEND = (
    "INSERT INTO key_spend (key_id, window, nanos) VALUES (?, ?, ?)"
    " ON CONFLICT (key_id, window) DO UPDATE SET nanos = nanos + excluded.nanos"
)
_ADD_RATE = (
    "INSERT INTO rate_seconds VALUES (?, ?, ?, ?) ON CONFLICT (key_id, second) DO UPDATE SET"
    " requests = requests + excluded.requests, tokens = tokens + excluded.tokens"
)
_ADD_USAGE = (
    "INSERT INTO usage VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT (key_id, model) DO UPDATE SET"
    " nanos = nanos + excluded.nanos, requests = requests + 1,"
    " input_tokens = input_tokens + excluded.input_tokens,"
    " output_tokens = output_tokens + excluded.output_tokens,"
    " estimated = estimated + excluded.estimated"
)


class SqliteLedger:
    """A Ledger in the sqlite database at `path`; opened on the first call."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-ledger")
        self._conn: sqlite3.Connection | None = None  # only ever touched on self._thread
        self._closed = False

    async def admit(self, ask: Admission) -> Admitted:
        return await self._run(lambda conn: _admit(conn, ask))

    async def settle(self, charge: Charge) -> None:
        await self._run(lambda conn: _settle(conn, charge))

    async def release(self, key_id: str, ticket: str, reserved_nanos: int) -> None:
        def op(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                conn.execute("DELETE FROM reservations WHERE ticket = ?", (ticket,))

        await self._run(op)

    async def create_key(self, record: KeyRecord) -> None:
        def op(conn: sqlite3.Connection) -> None:
            with _transaction(conn):
                row = (record.id, record.secret_hash, record_encoder.encode(record))
                conn.execute("INSERT INTO vkeys VALUES (?, ?, ?, ?)", (*row, record.created_at))

        await self._run(op)

    async def find_key(self, secret_hash: str) -> KeyRecord | None:
        return await self._run(lambda conn: _find(conn, "secret_hash", secret_hash))

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self._run(lambda conn: _find(conn, "id", key_id))

    async def list_keys(self) -> list[KeyRecord]:
        def op(conn: sqlite3.Connection) -> list[KeyRecord]:
            rows = conn.execute("SELECT record FROM vkeys ORDER BY created_at, id").fetchall()
            return [record_decoder.decode(row[0]) for row in rows]

        return await self._run(op)

    async def revoke_key(self, key_id: str) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            with _transaction(conn):
                record = _find(conn, "id", key_id)
                if record is None:
                    return False
                revoked = record_encoder.encode(msgspec.structs.replace(record, revoked=True))
                conn.execute("UPDATE vkeys SET record = ? WHERE id = ?", (revoked, key_id))
                return True

        return await self._run(op)

    async def key_spend(self, key_id: str, window: str, now: float) -> KeySpend:
        def op(conn: sqlite3.Connection) -> KeySpend:
            return KeySpend(
                total_nanos=_spent(conn, key_id, "total"),
                window_nanos=_spent(conn, key_id, window),
                reserved_nanos=_held(conn, key_id, now),
            )

        return await self._run(op)

    async def spend(self) -> list[SpendRow]:
        def op(conn: sqlite3.Connection) -> list[SpendRow]:
            rows = conn.execute(
                "SELECT key_id, model, nanos, requests, input_tokens, output_tokens, estimated"
                " FROM usage ORDER BY key_id, model"
            ).fetchall()
            return [
                SpendRow(
                    key_id=r[0],
                    model=r[1],
                    cost_nanos=r[2],
                    requests=r[3],
                    input_tokens=r[4],
                    output_tokens=r[5],
                    estimated=r[6],
                )
                for r in rows
            ]

        return await self._run(op)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await asyncio.get_running_loop().run_in_executor(self._thread, self._disconnect)
        self._thread.shutdown(wait=False)

    async def _run(self, op: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreUnavailable(f"sqlite store {self.path}: closed")
        return await asyncio.get_running_loop().run_in_executor(self._thread, self._call, op)

    def _call(self, op: Callable[[sqlite3.Connection], T]) -> T:
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


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        with _transaction(conn):
            for statement in _SCHEMA:
                conn.execute(statement)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _find(conn: sqlite3.Connection, column: str, value: str) -> KeyRecord | None:
    # `column` is one of two literals chosen by this module, never input
    row = conn.execute(f"SELECT record FROM vkeys WHERE {column} = ?", (value,)).fetchone()
    return None if row is None else record_decoder.decode(row[0])


def _spent(conn: sqlite3.Connection, key_id: str, window: str) -> int:
    row = conn.execute(
        "SELECT nanos FROM key_spend WHERE key_id = ? AND window = ?", (key_id, window)
    ).fetchone()
    return int(row[0]) if row is not None else 0


def _held(conn: sqlite3.Connection, key_id: str, now: float) -> int:
    row = conn.execute(
        "SELECT COALESCE(SUM(nanos), 0) FROM reservations WHERE key_id = ? AND expires_at > ?",
        (key_id, now),
    ).fetchone()
    return int(row[0])


def _admit(conn: sqlite3.Connection, ask: Admission) -> Admitted:
    with _transaction(conn):
        record = ask.record or _find(conn, "secret_hash", ask.secret_hash)
        if record is None:
            return Admitted(verdict="unknown")
        key_id, now = record.id, ask.now
        # one row per key and second: a window is at most 60 rows, whatever the rate
        horizon = int(now - WINDOW_S)
        conn.execute("DELETE FROM rate_seconds WHERE key_id = ? AND second <= ?", (key_id, horizon))
        conn.execute("DELETE FROM reservations WHERE key_id = ? AND expires_at <= ?", (key_id, now))
        rows = conn.execute(
            "SELECT second, requests, tokens FROM rate_seconds WHERE key_id = ? ORDER BY second",
            (key_id,),
        ).fetchall()
        count = sum(r[1] for r in rows)
        used = sum(r[2] for r in rows)
        oldest = next((r[0] for r in rows if r[1]), None)
        first = next((r[0] for r in rows if r[2]), None)
        window = window_of(record, ask.windows)
        verdict, retry = judge(
            record,
            ask,
            rpm_count=count,
            rpm_oldest=oldest,
            tpm_used=used,
            tpm_oldest=first,
            spent=_spent(conn, key_id, window),
            held=_held(conn, key_id, now),
        )
        if verdict != "ok":
            return Admitted(verdict=verdict, record=record, retry_after_s=retry)
        if record.rpm is not None:
            conn.execute(_ADD_RATE, (key_id, int(now), 1, 0))
        reserved = ask.reserve_nanos if record.budget_nanos is not None else 0
        if reserved:
            conn.execute(
                "INSERT INTO reservations VALUES (?, ?, ?, ?)",
                (ask.ticket, key_id, reserved, now + ask.hold_s),
            )
        return Admitted(verdict="ok", record=record, window=window, reserved_nanos=reserved)


def _settle(conn: sqlite3.Connection, charge: Charge) -> None:
    with _transaction(conn):
        key_id = charge.key_id
        if key_id:
            if charge.ticket:
                conn.execute("DELETE FROM reservations WHERE ticket = ?", (charge.ticket,))
            for window in {"total", charge.window or "total"}:
                conn.execute(_ADD_SPEND, (key_id, window, charge.cost_nanos))
            tokens = charge.input_tokens + charge.output_tokens
            conn.execute(_ADD_RATE, (key_id, int(charge.now), 0, tokens))
        conn.execute(
            _ADD_USAGE,
            (
                key_id,
                charge.model,
                charge.cost_nanos,
                charge.input_tokens,
                charge.output_tokens,
                int(charge.estimated),
            ),
        )
