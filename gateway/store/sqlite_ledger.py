"""The sqlite accounting store: one database file shared by the workers of one machine.

Every call runs on one thread this store owns, inside a `BEGIN IMMEDIATE` transaction (the
write lock before any read: an admission's checks and reservation are one atomic step across
processes). WAL with `synchronous = NORMAL`: a commit is in the WAL file before the call
returns, so a settled spend survives a SIGKILL (only a power cut loses the last commits).

Group commit: calls that arrive together run together in arrival order in ONE transaction (at
most MAX_BATCH), each in its own SAVEPOINT: each sees the effects of those before it exactly as
if it ran alone (admissions are judged one after another: a batch never admits past a budget),
and one that fails is rolled back and fails alone. A commit costs far more than one call's
statements, so under load one serves many. No call returns before its batch's COMMIT (nothing
is acknowledged that the database does not hold); a commit or lock wait that fails fails the
whole batch with StoreUnavailable.

Where a batch runs: on the event loop itself, in a callback scheduled two turns of the loop
after the first call of the batch arrives (so it holds every call made meanwhile), with a busy
timeout of zero. A transaction here takes tens of microseconds, far less than handing it to a
thread and waking the loop again (two cross-core wake-ups per call at one request in flight).
The loop never waits for a lock: when another process holds the write lock the batch is tried
again a fraction of a millisecond later (LOCK_RETRY_S), the loop serving everything else
meanwhile, until its oldest call has waited BUSY_TIMEOUT_S; then it fails. The store's thread
opens the connection (and is the fallback owner of the queue then, and with on_loop=False);
one owner at a time uses it. Commits never checkpoint (an fsync): the thread runs a PASSIVE
checkpoint on a connection of its own every CHECKPOINT_EVERY commits.

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
from typing import Any
from typing import Literal
from typing import NamedTuple
from typing import TypeVar

import msgspec

from gateway.store import sqlite_ledger_ops as ops
from gateway.store.kv import StoreUnavailable
from gateway.store.ledger import Admission
from gateway.store.ledger import Admitted
from gateway.store.ledger import CacheHits
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import KeySpend
from gateway.store.ledger import SpendRow
from gateway.store.ledger import record_decoder
from gateway.store.ledger import record_encoder

T = TypeVar("T")
BUSY_TIMEOUT_S = 5.0
# calls per transaction: bounds how long one batch holds the write lock (other processes
# wait for it) and how long its first caller waits for the last one's statements
MAX_BATCH = 256
# commits between two checkpoints: the WAL stays a few MiB
CHECKPOINT_EVERY = 500
# a batch that finds the write lock taken (another worker commits, for well under a
# millisecond) tries again this soon; after LOCK_RETRY_FAST_FOR_S of that (a long holder),
# every LOCK_RETRY_SLOW_S. sqlite's own busy handler sleeps 1, 2, 5, 10... ms: a p99 of
# hundreds of ms with two workers at full load.
LOCK_RETRY_S = 0.0002
LOCK_RETRY_FAST_FOR_S = 0.05
LOCK_RETRY_SLOW_S = 0.002
# who takes the queue next: a loop callback, the thread, or no one (the queue is empty)
_Owner = Literal["loop", "thread"] | None


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
    the connection class (sqlite3.connect's `factory`), for instrumenting the store;
    `on_loop=False` runs every batch on the thread (for tests of that path)."""

    def __init__(
        self,
        path: str,
        *,
        factory: type[sqlite3.Connection] = sqlite3.Connection,
        on_loop: bool = True,
    ) -> None:
        self.path = path
        self._factory = factory
        self._on_loop = on_loop
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gateway-ledger")
        self._conn: sqlite3.Connection | None = None  # used by the queue's owner only
        self._busy_ms = 0  # the connection's busy timeout now (set per batch, see _commit)
        self._closed = False
        # the queue and its owner are shared by the event loops and the thread
        self._lock = threading.Lock()
        self._queue: deque[_Call] = deque()
        self._owner: _Owner = None
        self._commits = 0  # since the last checkpoint was asked for
        self._checkpointing = False
        self._checkpoint_conn: sqlite3.Connection | None = None  # only on the thread
        self._swept: dict[str, int] = {}  # ops.admit's, used by the queue's owner only

    async def admit(self, ask: Admission) -> Admitted:
        return await self._run(lambda conn: ops.admit(conn, ask, self._swept))

    async def settle(self, charge: Charge) -> None:
        await self._run(lambda conn: ops.settle(conn, charge))

    async def release(self, key_id: str, ticket: str, reserved_nanos: int) -> None:
        await self._run(lambda conn: ops.release(conn, key_id, ticket))

    async def create_key(self, record: KeyRecord) -> None:
        def op(conn: sqlite3.Connection) -> None:
            row = (record.id, record.secret_hash, record_encoder.encode(record))
            conn.execute("INSERT INTO vkeys VALUES (?, ?, ?, ?)", (*row, record.created_at))

        await self._run(op)

    async def find_key(self, secret_hash: str) -> KeyRecord | None:
        return await self._run(
            lambda conn: ops.find(conn, "secret_hash", secret_hash), writes=False
        )

    async def get_key(self, key_id: str) -> KeyRecord | None:
        return await self._run(lambda conn: ops.find(conn, "id", key_id), writes=False)

    async def list_keys(self) -> list[KeyRecord]:
        def op(conn: sqlite3.Connection) -> list[KeyRecord]:
            rows = conn.execute("SELECT record FROM vkeys ORDER BY created_at, id").fetchall()
            return [record_decoder.decode(row[0]) for row in rows]

        return await self._run(op, writes=False)

    async def revoke_key(self, key_id: str) -> bool:
        def op(conn: sqlite3.Connection) -> bool:
            record = ops.find(conn, "id", key_id)
            if record is None:
                return False
            revoked = record_encoder.encode(msgspec.structs.replace(record, revoked=True))
            conn.execute("UPDATE vkeys SET record = ? WHERE id = ?", (revoked, key_id))
            return True

        return await self._run(op)

    async def key_spend(self, key_id: str, window: str, now: float) -> KeySpend:
        def op(conn: sqlite3.Connection) -> KeySpend:
            return KeySpend(
                total_nanos=ops.spent(conn, key_id, "total"),
                window_nanos=ops.spent(conn, key_id, window),
                reserved_nanos=ops.held(conn, key_id, now),
            )

        return await self._run(op, writes=False)

    async def count_hits(self, hits: list[CacheHits]) -> None:
        await self._run(lambda conn: ops.count_hits(conn, hits))

    async def spend(self) -> list[SpendRow]:
        return await self._run(ops.spend_rows, writes=False)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # calls already queued are committed first; then no one owns the connection
        with contextlib.suppress(StoreUnavailable):
            await self._enqueue(lambda conn: None, writes=False)
        await asyncio.get_running_loop().run_in_executor(self._thread, self._disconnect)
        self._thread.shutdown(wait=False)

    async def _run(self, op: Callable[[sqlite3.Connection], T], *, writes: bool = True) -> T:
        if self._closed:
            raise StoreUnavailable(f"sqlite store {self.path}: closed")
        return await self._enqueue(op, writes=writes)

    async def _enqueue(self, op: Callable[[sqlite3.Connection], T], *, writes: bool) -> T:
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        loop = future.get_loop()
        with self._lock:
            self._queue.append(_Call(op, writes, loop, future, time.monotonic()))
            if self._owner is None:
                if self._on_loop and self._conn is not None:
                    self._owner = "loop"
                    # two turns of the loop away: the handlers of the requests that arrived
                    # with this one (one poll) queue their calls first (measured: batches
                    # of ~11 calls instead of ~6 at 16 connections, 15% less CPU per request)
                    loop.call_soon(loop.call_soon, self._flush_on_loop, loop)
                else:
                    self._owner = "thread"
                    self._thread.submit(self._drain)
        return await future

    def _flush_on_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        """On the event loop: commit the queued calls without waiting for a lock; while
        another process holds it, try again every LOCK_RETRY_S (the loop goes on meanwhile),
        until the oldest call has waited BUSY_TIMEOUT_S."""
        with self._lock:
            if self._conn is None:  # lost after a failed rollback: reopened on the thread
                self._owner = "thread"
                self._thread.submit(self._drain)
                return
            size = min(len(self._queue), MAX_BATCH)
            batch = [self._queue.popleft() for _ in range(size)]
        try:
            outcomes = self._commit(batch, wait=False) if batch else []
        except Exception as exc:  # a bug here must not leave callers waiting forever
            outcomes = self._all_failed(batch, exc)
        with self._lock:
            if outcomes is None:  # locked by another process: try again soon, on the loop
                waited = time.monotonic() - batch[0].queued_at
                if waited < BUSY_TIMEOUT_S:
                    self._queue.extendleft(reversed(batch))
                    retry = LOCK_RETRY_S if waited < LOCK_RETRY_FAST_FOR_S else LOCK_RETRY_SLOW_S
                    loop.call_later(retry, self._flush_on_loop, loop)
                    return
                outcomes = self._all_failed(batch, sqlite3.OperationalError("database is locked"))
            # over MAX_BATCH, or calls from another loop: the next callback takes them
            self._owner = "loop" if self._queue else None
            if self._owner is not None:
                loop.call_soon(self._flush_on_loop, loop)
        _answer(batch, outcomes, loop)

    def _drain(self) -> None:
        """On the store's thread: commit batches until the queue is empty."""
        while True:
            with self._lock:
                if not self._queue:
                    self._owner = None
                    return
                size = min(len(self._queue), MAX_BATCH)
                batch = [self._queue.popleft() for _ in range(size)]
            try:
                outcomes = self._commit(batch, wait=True)
            except Exception as exc:  # a bug here must not leave callers waiting forever
                outcomes = self._all_failed(batch, exc)
            assert outcomes is not None  # only a batch that does not wait is given back
            _answer(batch, outcomes, None)

    def _commit(self, batch: list[_Call], *, wait: bool) -> list[_Outcome] | None:
        """Runs the batch in one transaction; the outcomes hold only once it committed.
        Without `wait`, None when another connection holds the write lock (nothing ran)."""
        try:
            if self._conn is None:
                self._conn = ops.connect(self.path, self._factory, BUSY_TIMEOUT_S)
                self._busy_ms = int(BUSY_TIMEOUT_S * 1000)
            conn = self._conn
            if wait:
                self._bound_lock_wait(conn, batch[0].queued_at)
            elif self._busy_ms:
                conn.execute("PRAGMA busy_timeout = 0")
                self._busy_ms = 0
            # reads alone need no write lock: another process's writer does not block them
            conn.execute("BEGIN IMMEDIATE" if any(c.writes for c in batch) else "BEGIN")
        except sqlite3.Error as exc:
            if not wait and getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_BUSY:
                return None
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
        self._commits += 1
        if self._commits >= CHECKPOINT_EVERY and not self._checkpointing:
            self._commits, self._checkpointing = 0, True
            self._thread.submit(self._checkpoint)
        return outcomes

    def _checkpoint(self) -> None:
        """On the thread: copies the WAL into the database without blocking any writer."""
        try:
            if self._checkpoint_conn is None:
                self._checkpoint_conn = sqlite3.connect(self.path, isolation_level=None)
            self._checkpoint_conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        except sqlite3.Error:
            pass  # a busy or failed checkpoint is retried after the next CHECKPOINT_EVERY
        finally:
            self._checkpointing = False

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
        if self._checkpoint_conn is not None:
            self._checkpoint_conn.close()
            self._checkpoint_conn = None


def _answer(
    batch: list[_Call], outcomes: list[_Outcome], here: asyncio.AbstractEventLoop | None
) -> None:
    """Answers each call on its event loop: directly on `here` (the loop running this),
    with one wake-up per other loop."""
    if here is not None and all(call.loop is here for call in batch):
        _resolve([(call.future, outcome) for call, outcome in zip(batch, outcomes, strict=True)])
        return
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], _Outcome]]] = {}
    for call, outcome in zip(batch, outcomes, strict=True):
        by_loop.setdefault(call.loop, []).append((call.future, outcome))
    for loop, answers in by_loop.items():
        if loop is here:
            _resolve(answers)
            continue
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
