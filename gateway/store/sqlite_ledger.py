"""The sqlite accounting store: one database file shared by the workers of one machine.

Every call runs on one thread this store owns, inside a `BEGIN IMMEDIATE` transaction (the
write lock before any read: an admission's checks and reservation are one atomic step across
processes). WAL with `synchronous = NORMAL`: a commit is in the WAL file before the call
returns, so a settled spend survives a SIGKILL (only a power cut loses the last commits).

Group commit: calls that arrive while the thread is busy queue, then run together in arrival
order in ONE transaction (at most MAX_BATCH), each in its own SAVEPOINT: each sees the
effects of those before it exactly as if it ran alone (admissions are judged one after
another: a batch never admits past a budget), and one that fails is rolled back and fails
alone. A commit costs far more than one call's statements, so under load one serves many.
No call returns before its batch's COMMIT (nothing is acknowledged that the database does
not hold); a commit or lock wait that fails fails the whole batch with StoreUnavailable.
A call waits for another process's lock BUSY_TIMEOUT_S in all, its time queued behind a
batch that waited included. Callers are answered with one wake-up of their event loop.

The rpm and tpm windows count per key and second (`rate_seconds`): an admission reads at
most 60 rows; a request leaves the window within a second of being a minute old.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar

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
# calls per transaction: bounds how long one batch holds the write lock (other processes
# wait for it) and how long its first caller waits for the last one's statements
MAX_BATCH = 256

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
# requests and tokens in the window, and the oldest second that counted each
_RATE_WINDOW = (
    "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(tokens), 0),"
    " MIN(CASE WHEN requests > 0 THEN second END), MIN(CASE WHEN tokens > 0 THEN second END)"
    " FROM rate_seconds WHERE key_id = ?"
)
_ADD_USAGE = (
    "INSERT INTO usage VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT (key_id, model) DO UPDATE SET"
    " nanos = nanos + excluded.nanos, requests = requests + 1,"
    " input_tokens = input_tokens + excluded.input_tokens,"
    " output_tokens = output_tokens + excluded.output_tokens,"
    " estimated = estimated + excluded.estimated"
)


class _Call(NamedTuple):
    """One queued call: what it runs, whether it writes, where it is answered, and when
    it was queued (monotonic)."""

    run: Callable[[sqlite3.Connection], Any]
    writes: bool
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    queued_at: float


# one call's outcome: (None, value) or (the error to raise, None)
_Outcome = tuple[BaseException | None, Any]


class SqliteLedger:
    """A Ledger in the sqlite database at `path`; opened on the first call. `factory` is
    the connection class (sqlite3.connect's `factory`), for instrumenting the store."""

    def __init__(
        self, path: str, *, factory: type[sqlite3.Connection] = sqlite3.Connection
    ) -> None:
        self.path = path
        self._factory = factory
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-ledger")
        self._conn: sqlite3.Connection | None = None  # only ever touched on self._thread
        self._busy_ms = 0  # the connection's busy timeout now (set per batch, see _commit)
        self._closed = False
        # the queue is shared by the event loops (which add) and the thread (which takes)
        self._lock = threading.Lock()
        self._queue: deque[_Call] = deque()
        self._draining = False  # a _drain is submitted to the thread and not yet done

    async def admit(self, ask: Admission) -> Admitted:
        return await self._run(lambda conn: _admit(conn, ask))

    async def settle(self, charge: Charge) -> None:
        await self._run(lambda conn: _settle(conn, charge))

    async def release(self, key_id: str, ticket: str, reserved_nanos: int) -> None:
        def op(conn: sqlite3.Connection) -> None:
            conn.execute("DELETE FROM reservations WHERE ticket = ?", (ticket,))

        await self._run(op)

    async def create_key(self, record: KeyRecord) -> None:
        def op(conn: sqlite3.Connection) -> None:
            row = (record.id, record.secret_hash, record_encoder.encode(record))
            conn.execute("INSERT INTO vkeys VALUES (?, ?, ?, ?)", (*row, record.created_at))

        await self._run(op)

    async def find_key(self, secret_hash: str) -> KeyRecord | None:
        return await self._run(lambda conn: _find(conn, "secret_hash", secret_hash), writes=False)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self._run(lambda conn: _find(conn, "id", key_id), writes=False)

    async def list_keys(self) -> list[KeyRecord]:
        def op(conn: sqlite3.Connection) -> list[KeyRecord]:
            rows = conn.execute("SELECT record FROM vkeys ORDER BY created_at, id").fetchall()
            return [record_decoder.decode(row[0]) for row in rows]

        return await self._run(op, writes=False)

    async def revoke_key(self, key_id: str) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
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

        return await self._run(op, writes=False)

    async def spend(self) -> list[SpendRow]:
        def op(conn: sqlite3.Connection) -> list[SpendRow]:
            cursor = conn.execute(
                "SELECT key_id, model, nanos AS cost_nanos, requests, input_tokens,"
                " output_tokens, estimated FROM usage ORDER BY key_id, model"
            )
            fields = [column[0] for column in cursor.description]  # SpendRow's names
            return [SpendRow(**dict(zip(fields, row, strict=True))) for row in cursor]

        return await self._run(op, writes=False)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # the thread takes its work in order: calls already queued are committed first
        await asyncio.get_running_loop().run_in_executor(self._thread, self._disconnect)
        self._thread.shutdown(wait=False)

    async def _run(self, op: Callable[[sqlite3.Connection], T], *, writes: bool = True) -> T:
        if self._closed:
            raise StoreUnavailable(f"sqlite store {self.path}: closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._queue.append(_Call(op, writes, loop, future, time.monotonic()))
            start, self._draining = not self._draining, True
        if start:
            self._thread.submit(self._drain)
        return await future

    def _drain(self) -> None:
        """On the store's thread: commit batches until the queue is empty."""
        while True:
            with self._lock:
                if not self._queue:
                    self._draining = False
                    return
                size = min(len(self._queue), MAX_BATCH)
                batch = [self._queue.popleft() for _ in range(size)]
            try:
                outcomes = self._commit(batch)
            except Exception as exc:  # a bug here must not leave callers waiting forever
                outcomes = self._all_failed(batch, exc)
            _answer(batch, outcomes)

    def _commit(self, batch: list[_Call]) -> list[_Outcome]:
        """Runs the batch in one transaction; the outcomes hold only once it committed."""
        try:
            if self._conn is None:
                self._conn = _connect(self.path, self._factory)
                self._busy_ms = int(BUSY_TIMEOUT_S * 1000)
            conn = self._conn
            self._bound_lock_wait(conn, batch[0].queued_at)
            # reads alone need no write lock: another process's writer does not block them
            conn.execute("BEGIN IMMEDIATE" if any(c.writes for c in batch) else "BEGIN")
        except sqlite3.Error as exc:
            return self._all_failed(batch, exc)
        try:
            if len(batch) > 1:
                outcomes = [self._in_savepoint(conn, call) for call in batch]
            else:  # alone, a call's failure is its transaction's: no savepoint needed
                outcomes = [(None, batch[0].run(conn))]
            conn.execute("COMMIT")
        except Exception as exc:  # the transaction is lost: nothing of the batch holds
            self._abandon(conn)
            return [(self._failure(exc), None)] if len(batch) == 1 else self._all_failed(batch, exc)
        return outcomes

    def _bound_lock_wait(self, conn: sqlite3.Connection, oldest: float) -> None:
        # what is left of the oldest call's busy timeout (see the module docstring)
        ms = max(1, int((BUSY_TIMEOUT_S - (time.monotonic() - oldest)) * 1000))
        if abs(ms - self._busy_ms) >= 10:  # only after a wait in the queue
            conn.execute(f"PRAGMA busy_timeout = {ms}")  # an int this module computed
            self._busy_ms = ms

    def _in_savepoint(self, conn: sqlite3.Connection, call: _Call) -> _Outcome:
        conn.execute("SAVEPOINT call")
        try:
            value = call.run(conn)
        except Exception as exc:
            if not conn.in_transaction:
                raise  # sqlite rolled the whole transaction back (disk full, I/O error)
            conn.execute("ROLLBACK TO call")
            conn.execute("RELEASE call")
            return self._failure(exc), None
        conn.execute("RELEASE call")
        return None, value

    def _failure(self, exc: Exception) -> Exception:
        """What a call that raised `exc` raises: sqlite's errors are StoreUnavailable."""
        return self._unavailable(exc) if isinstance(exc, sqlite3.Error) else exc

    def _all_failed(self, batch: list[_Call], exc: Exception) -> list[_Outcome]:
        return [(self._unavailable(exc), None) for _ in batch]

    def _unavailable(self, exc: Exception) -> StoreUnavailable:
        failure = StoreUnavailable(f"sqlite store {self.path}: {exc}")
        failure.__cause__ = exc
        return failure

    def _abandon(self, conn: sqlite3.Connection) -> None:
        with contextlib.suppress(sqlite3.Error):
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        if conn.in_transaction:  # it cannot even roll back: the next batch opens a new one
            self._disconnect()

    def _disconnect(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _answer(batch: list[_Call], outcomes: list[_Outcome]) -> None:
    """From the store's thread: one wake-up per event loop answers its calls of the batch."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], _Outcome]]] = {}
    for call, outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(call.loop, []).append((call.future, outcome))
    for loop, answers in by_loop.items():
        with contextlib.suppress(RuntimeError):  # that loop closed: no one waits there now
            loop.call_soon_threadsafe(_resolve, answers)


def _resolve(answers: list[tuple[asyncio.Future[Any], _Outcome]]) -> None:
    for future, (error, value) in answers:
        if future.done():
            continue  # the caller was cancelled
        if error is None:
            future.set_result(value)
        else:
            future.set_exception(error)


def _connect(path: str, factory: type[sqlite3.Connection]) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_S, isolation_level=None, factory=factory)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA:
            conn.execute(statement)
        conn.execute("COMMIT")
    except BaseException:
        conn.close()  # which rolls back a transaction left open
        raise
    return conn


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
    record = ask.record or _find(conn, "secret_hash", ask.secret_hash)
    if record is None:
        return Admitted(verdict="unknown")
    key_id, now = record.id, ask.now
    # one row per key and second: a window is at most 60 rows, whatever the rate
    horizon = int(now - WINDOW_S)
    conn.execute("DELETE FROM rate_seconds WHERE key_id = ? AND second <= ?", (key_id, horizon))
    conn.execute("DELETE FROM reservations WHERE key_id = ? AND expires_at <= ?", (key_id, now))
    # summed by sqlite: a third of the time of summing a busy key's 60 rows in Python
    count, used, oldest, first = conn.execute(_RATE_WINDOW, (key_id,)).fetchone()
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
