"""The sqlite ledger commits its batches on the event loop when it can: no thread hop for a
request alone, one transaction for the calls of one loop iteration, the store's thread only
when another connection holds the write lock (the loop never waits for it), and checkpoints
on the thread rather than inside a commit."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from pathlib import Path

import pytest

from gateway.store import sqlite_ledger
from gateway.store.sqlite_ledger import SqliteLedger
from tests.store.test_sqlite_group_commit import NOW
from tests.store.test_sqlite_group_commit import Probe
from tests.store.test_sqlite_group_commit import ask
from tests.store.test_sqlite_group_commit import charge
from tests.store.test_sqlite_group_commit import key

MAIN = threading.get_ident()


class ThreadProbe(Probe):
    """A Probe that also notes the thread of every BEGIN."""

    def __init__(self) -> None:
        super().__init__()
        self.begin_threads: list[int] = []
        self.on_commit = None

    def factory(self) -> type[sqlite3.Connection]:
        base = super().factory()
        probe = self

        class ThreadedConnection(base):  # type: ignore[valid-type, misc]
            def execute(self, sql: str, parameters: object = (), /) -> sqlite3.Cursor:
                if sql.startswith("BEGIN"):
                    probe.begin_threads.append(threading.get_ident())
                return super().execute(sql, parameters)

        return ThreadedConnection


async def thread_idle(store: SqliteLedger) -> None:
    """Until the store's thread has let go of the queue: it answers a batch before it looks
    for the next, so a call made at once after its answer may still be taken there."""
    for _ in range(100):
        if store._owner is None:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the store's thread kept the queue")


@pytest.fixture
async def probed(tmp_path: Path) -> tuple[SqliteLedger, ThreadProbe]:
    probe = ThreadProbe()
    store = SqliteLedger(str(tmp_path / "ledger.db"), factory=probe.factory())
    await store.create_key(key(budget_nanos=10_000))  # opens the database on the thread
    await thread_idle(store)
    yield store, probe  # type: ignore[misc]
    await store.close()


async def test_the_database_is_opened_on_the_thread_then_calls_run_on_the_loop(
    probed: tuple[SqliteLedger, ThreadProbe],
) -> None:
    ledger, probe = probed
    assert probe.begin_threads[-1] != MAIN  # the first call opened the database there
    before = len(probe.begin_threads)
    for i in range(5):
        admitted = await ledger.admit(ask(f"t{i}", 100))
        assert admitted.verdict == "ok"
    assert probe.begin_threads[before:] == [MAIN] * 5


async def test_calls_of_one_loop_iteration_share_one_transaction(
    probed: tuple[SqliteLedger, ThreadProbe],
) -> None:
    ledger, probe = probed
    before = len(probe.batches())
    settles = [ledger.settle(charge("", 1, key_id="", model=f"up/{i}")) for i in range(12)]
    assert await asyncio.gather(*settles) == [None] * 12
    assert probe.batches()[before:] == [12]
    assert probe.begin_threads[-1] == MAIN
    assert len(await ledger.spend()) == 12


async def test_a_locked_database_is_retried_on_the_loop_which_keeps_running(
    probed: tuple[SqliteLedger, ThreadProbe], tmp_path: Path
) -> None:
    """Another connection holds the write lock for 0.3 s: the settle is tried again every
    fraction of a millisecond on the loop, which serves everything else meanwhile, and
    commits as soon as the lock is free (not after a sleep of sqlite's busy handler)."""
    ledger, probe = probed
    blocker = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    ticking = asyncio.create_task(ticker())
    try:
        blocker.execute("BEGIN IMMEDIATE")
        loop = asyncio.get_running_loop()
        before = len(probe.begin_threads)
        released_at = 0.0

        def release() -> None:
            nonlocal released_at
            blocker.execute("COMMIT")
            released_at = loop.time()

        loop.call_later(0.3, release)
        await ledger.settle(charge("", 7, key_id="", model="up/locked"))
        assert released_at  # committed only once the lock was free...
        assert loop.time() - released_at < 0.05  # ...and at once, not after a busy sleep
        assert ticks >= 10  # the loop was not blocked while the lock was held
        tries = probe.begin_threads[before:]
        assert len(tries) > 20
        assert set(tries) == {MAIN}  # every try on the loop
        assert [(r.model, r.cost_nanos) for r in await ledger.spend()] == [("up/locked", 7)]
    finally:
        ticking.cancel()
        blocker.close()


async def test_calls_queued_while_a_batch_waits_for_the_lock_follow_it_in_order(
    probed: tuple[SqliteLedger, ThreadProbe], tmp_path: Path
) -> None:
    """While a batch waits for the lock, later calls queue behind it (never run before
    it): the admissions are judged in arrival order."""
    ledger, _ = probed
    blocker = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    try:
        blocker.execute("BEGIN IMMEDIATE")
        asyncio.get_running_loop().call_later(0.2, blocker.execute, "COMMIT")
        first = asyncio.ensure_future(ledger.admit(ask("t0", 6_000)))
        await asyncio.sleep(0.05)  # the first batch waits for the lock
        second = asyncio.ensure_future(ledger.admit(ask("t1", 6_000)))
        assert (await first).verdict == "ok"
        assert (await second).verdict == "budget"  # judged after the first's reservation
    finally:
        blocker.close()


async def test_commits_do_not_checkpoint_the_thread_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database file grows only by the thread's checkpoints: with none due it keeps its
    size while the WAL takes the commits; once CHECKPOINT_EVERY commits are made it grows."""
    db = tmp_path / "ledger.db"
    monkeypatch.setattr(sqlite_ledger, "CHECKPOINT_EVERY", 10**9)
    ledger = SqliteLedger(str(db))
    try:
        await ledger.create_key(key())
        size = db.stat().st_size
        for i in range(60):
            await ledger.settle(charge("", 1, key_id="", model=f"up/{i:04d}" + "x" * 200))
        assert db.stat().st_size == size  # no commit checkpointed
        monkeypatch.setattr(sqlite_ledger, "CHECKPOINT_EVERY", 5)
        for i in range(5):
            await ledger.settle(charge("", 1, key_id="", model=f"up/more{i}"))
        for _ in range(100):  # the checkpoint runs on the thread: wait for it (bounded)
            if db.stat().st_size > size:
                break
            await asyncio.sleep(0.02)
        assert db.stat().st_size > size
    finally:
        await ledger.close()


async def test_reservations_of_an_earlier_version_keep_holding(tmp_path: Path) -> None:
    """A database made by a version with the `reservations` table: its holds move over."""
    db = tmp_path / "ledger.db"
    old = sqlite3.connect(db, isolation_level=None)
    old.execute(
        "CREATE TABLE reservations (ticket TEXT PRIMARY KEY, key_id TEXT NOT NULL,"
        " nanos INTEGER NOT NULL, expires_at REAL NOT NULL)"
    )
    old.execute("INSERT INTO reservations VALUES ('t-old', 'k1', 900, ?)", (NOW + 600,))
    old.close()
    ledger = SqliteLedger(str(db))
    try:
        await ledger.create_key(key(budget_nanos=1000))
        assert (await ledger.key_spend("k1", "total", NOW)).reserved_nanos == 900
        assert (await ledger.admit(ask("t-new", 200))).verdict == "budget"
        await ledger.release("k1", "t-old", 900)
        assert (await ledger.admit(ask("t-new", 200))).verdict == "ok"
    finally:
        await ledger.close()
    conn = sqlite3.connect(db)
    try:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    finally:
        conn.close()
    assert "reservations" not in {row[0] for row in tables}
