"""Group commit in the sqlite ledger: calls queued while its thread is busy share one
transaction, yet each keeps the effects and the answer it would have had alone, fails alone,
and is answered only once the transaction is committed.

A `Probe` is a sqlite3.Connection class (the ledger's `factory`) that sees every statement
the ledger runs: it can hold the store's thread at a BEGIN (so the calls made meanwhile
queue and form the next batch), slow down or fail a COMMIT, and count the batches."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gateway.store import sqlite_ledger
from gateway.store.kv import StoreUnavailable
from gateway.store.ledger import Admission
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.sqlite_ledger import SqliteLedger

NOW = 1_764_000_000.0


class Probe:
    """What the ledger's connection executes, and the knobs to disturb it."""

    def __init__(self) -> None:
        self.statements: list[str] = []
        self.hold = threading.Event()  # set: the next BEGIN waits for `resume`
        self.held = threading.Event()
        self.resume = threading.Event()
        self.commit_delay_s = 0.0
        self.fail_commits = 0
        self.on_commit: Callable[[], None] | None = None

    def factory(self) -> type[sqlite3.Connection]:
        probe = self

        class ProbedConnection(sqlite3.Connection):
            def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
                probe.statements.append(sql)
                if sql.startswith("BEGIN") and probe.hold.is_set():
                    probe.hold.clear()
                    probe.held.set()
                    probe.resume.wait(10)
                if sql == "COMMIT":
                    time.sleep(probe.commit_delay_s)
                    if probe.on_commit is not None:
                        probe.on_commit()
                    if probe.fail_commits:
                        probe.fail_commits -= 1
                        raise sqlite3.OperationalError("disk I/O error (injected)")
                return super().execute(sql, parameters)

        return ProbedConnection

    def batches(self) -> list[int]:
        """Calls per transaction so far (a batch of one runs without a savepoint)."""
        sizes: list[int] = []
        for sql in self.statements:
            if sql.startswith("BEGIN"):
                sizes.append(0)
            elif sql == "SAVEPOINT call":
                sizes[-1] += 1
        return [size or 1 for size in sizes]


def key(**fields: Any) -> KeyRecord:
    return KeyRecord(**({"id": "k1", "name": "k", "secret_hash": "h1"} | fields))


def ask(ticket: str, reserve: int = 0, *, secret_hash: str = "h1", now: float = NOW) -> Admission:
    return Admission(
        ticket=ticket,
        now=now,
        model="m",
        reserve_nanos=reserve,
        tokens=10,
        hold_s=600.0,
        windows={"total": "total"},
        secret_hash=secret_hash,
    )


def charge(ticket: str, cost: int, *, key_id: str = "k1", model: str = "up/m") -> Charge:
    return Charge(
        key_id=key_id,
        model=model,
        cost_nanos=cost,
        input_tokens=10,
        output_tokens=5,
        estimated=False,
        now=NOW,
        ticket=ticket,
        window="total",
    )


async def in_one_batch(
    ledger: SqliteLedger, probe: Probe, calls: list[Callable[[], Awaitable[Any]]]
) -> list[Any]:
    """Runs `calls` as one batch: the store's thread is held at the BEGIN of a batch of its
    own while they queue, in order. Returns each call's result or exception."""
    probe.hold.set()
    first = asyncio.ensure_future(ledger.get_key("none"))
    assert await asyncio.to_thread(probe.held.wait, 10)
    tasks = [asyncio.ensure_future(call()) for call in calls]
    await asyncio.sleep(0)  # every task runs to its first await: all are queued now
    probe.resume.set()
    await asyncio.gather(first, return_exceptions=True)  # a failed commit fails it too
    return await asyncio.gather(*tasks, return_exceptions=True)


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
async def ledger(tmp_path: Path, probe: Probe) -> Any:
    # the thread path: the probe holds the thread at a BEGIN while calls queue
    store = SqliteLedger(str(tmp_path / "ledger.db"), factory=probe.factory(), on_loop=False)
    await store.create_key(key(budget_nanos=1000))  # also opens the database
    try:
        yield store
    finally:
        probe.resume.set()
        await store.close()


def rows(path: Path, sql: str, parameters: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Read through a connection of its own: only what is committed."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, parameters).fetchall()
    finally:
        conn.close()


async def test_a_batch_never_admits_past_the_budget(ledger: SqliteLedger, probe: Probe) -> None:
    """100 admissions of 100 against a budget of 1000 in one transaction: the first ten in
    arrival order are admitted, as they would be one by one."""
    results = await in_one_batch(
        ledger, probe, [lambda i=i: ledger.admit(ask(f"t{i}", 100)) for i in range(100)]
    )
    assert probe.batches()[-1] == 100
    assert [r.verdict for r in results] == ["ok"] * 10 + ["budget"] * 90
    assert (await ledger.key_spend("k1", "total", NOW)).reserved_nanos == 1000


async def test_a_failing_call_fails_alone(
    ledger: SqliteLedger, probe: Probe, tmp_path: Path
) -> None:
    """In the middle of a batch: a duplicate key (constraint error) and a settle that fails
    after half its statements (a null model). Only they fail; the half-done settle leaves
    nothing behind (its reservation is still held, its cost not counted)."""
    await ledger.admit(ask("held", 300))
    broken = charge("held", 999, model=None)  # type: ignore[arg-type]
    results = await in_one_batch(
        ledger,
        probe,
        [
            lambda: ledger.settle(charge("a", 100, key_id="", model="up/a")),
            lambda: ledger.create_key(key(secret_hash="other")),  # id k1 exists
            lambda: ledger.settle(charge("b", 200, key_id="", model="up/b")),
            lambda: ledger.settle(broken),
            lambda: ledger.admit(ask("t1", 100)),
            lambda: ledger.settle(charge("t1", 50)),
        ],
    )
    assert probe.batches()[-1] == 6
    assert [results[i] for i in (0, 2, 5)] == [None, None, None]
    assert isinstance(results[1], StoreUnavailable)
    assert "UNIQUE" in str(results[1])
    assert isinstance(results[3], StoreUnavailable)
    assert "NOT NULL" in str(results[3])
    assert (results[4].verdict, results[4].reserved_nanos) == ("ok", 100)
    db = tmp_path / "ledger.db"
    usage = rows(db, "SELECT key_id, model, nanos FROM usage ORDER BY model")
    assert usage == [("", "up/a", 100), ("", "up/b", 200), ("k1", "up/m", 50)]
    assert rows(db, "SELECT ticket, nanos FROM holds") == [("held", 300)]
    assert rows(db, "SELECT window, nanos FROM key_spend") == [("total", 50)]
    assert rows(db, "SELECT id FROM vkeys") == [("k1",)]


async def test_no_call_is_answered_before_its_batch_commits(
    ledger: SqliteLedger, probe: Probe, tmp_path: Path
) -> None:
    """Every answer finds its spend committed (read through another connection); at each
    COMMIT, slowed down to give a premature answer time to show, only calls of batches
    committed before are done."""
    db = tmp_path / "ledger.db"
    seen: list[int] = []
    at_commit: list[tuple[int, int]] = []  # (calls done, calls in earlier batches)
    tasks: list[asyncio.Future[None]] = []
    base = len(probe.batches())

    def on_commit() -> None:
        earlier = sum(probe.batches()[base:-1])
        at_commit.append((sum(t.done() for t in tasks), earlier))

    def check_committed(model: str) -> None:
        found = rows(db, "SELECT requests FROM usage WHERE model = ?", (model,))
        seen.append(found[0][0] if found else 0)

    probe.commit_delay_s = 0.05
    probe.on_commit = on_commit
    for i in range(20):
        model = f"up/m{i}"
        task = asyncio.ensure_future(ledger.settle(charge("", 1, key_id="", model=model)))
        task.add_done_callback(lambda _, model=model: check_committed(model))
        tasks.append(task)
    await asyncio.gather(*tasks)
    assert seen == [1] * 20
    assert len(at_commit) < 20  # the settles were grouped, not committed one by one
    assert all(done <= earlier for done, earlier in at_commit), at_commit


async def test_a_failed_commit_fails_every_call_of_the_batch(
    ledger: SqliteLedger, probe: Probe, tmp_path: Path
) -> None:
    probe.fail_commits = 2  # the holding batch's and the next
    results = await in_one_batch(
        ledger,
        probe,
        [lambda i=i: ledger.settle(charge("", 10, key_id="", model=f"up/{i}")) for i in range(5)],
    )
    assert probe.batches()[-1] == 5
    assert all(isinstance(r, StoreUnavailable) and "injected" in str(r) for r in results)
    assert rows(tmp_path / "ledger.db", "SELECT * FROM usage") == []
    await ledger.settle(charge("", 10, key_id="", model="up/after"))  # the store recovers
    assert [row.model for row in await ledger.spend()] == ["up/after"]


async def test_a_busy_database_fails_the_batch_then_recovers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process holds the write lock beyond the busy timeout: the queued writes all
    fail with StoreUnavailable; reads alone need no write lock and still answer."""
    monkeypatch.setattr(sqlite_ledger, "BUSY_TIMEOUT_S", 0.05)
    ledger = SqliteLedger(str(tmp_path / "ledger.db"))
    blocker = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    try:
        await ledger.create_key(key())
        blocker.execute("BEGIN IMMEDIATE")
        writes = [ledger.settle(charge("", 1, key_id="", model=f"up/{i}")) for i in range(8)]
        results = await asyncio.gather(*writes, return_exceptions=True)
        assert all(isinstance(r, StoreUnavailable) and "locked" in str(r) for r in results)
        assert (await ledger.get_key("k1")) == key()
        blocker.execute("COMMIT")
        await ledger.settle(charge("", 1, key_id="", model="up/after"))
        assert [row.model for row in await ledger.spend()] == ["up/after"]
    finally:
        blocker.close()
        await ledger.close()


async def test_batches_are_bounded(ledger: SqliteLedger, probe: Probe) -> None:
    before = len(probe.batches())
    results = await in_one_batch(
        ledger,
        probe,
        [lambda i=i: ledger.settle(charge("", 1, key_id="", model="up/m")) for i in range(600)],
    )
    assert results == [None] * 600
    assert probe.batches()[before + 1 :] == [256, 256, 88]
    assert (await ledger.spend())[0].requests == 600


async def test_a_cancelled_caller_does_not_disturb_its_batch(
    ledger: SqliteLedger, probe: Probe
) -> None:
    probe.hold.set()
    first = asyncio.ensure_future(ledger.get_key("none"))
    assert await asyncio.to_thread(probe.held.wait, 10)
    tasks = [asyncio.ensure_future(ledger.admit(ask(f"t{i}", 100))) for i in range(4)]
    await asyncio.sleep(0)
    tasks[1].cancel()
    probe.resume.set()
    await first
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(results[1], asyncio.CancelledError)
    assert [results[i].verdict for i in (0, 2, 3)] == ["ok"] * 3  # type: ignore[union-attr]
    # it was queued before it was cancelled: its reservation was made all the same (and
    # expires, as that of a request that dies after its admission)
    assert (await ledger.key_spend("k1", "total", NOW)).reserved_nanos == 400
