"""Store fault: another process holds the sqlite database's write lock (`BEGIN EXCLUSIVE`)
for longer than the gateway's busy timeout (5 s) while the gateway serves a bounded load for
a virtual key with a budget.

The store's calls run in batches (group commit): the batch that meets the lock waits the busy
timeout and fails whole; the calls that queued behind it meanwhile have used up their busy
timeout too and fail at once (a call waits the busy timeout in all, not once per batch). Their
admissions are refused with 503 `store_unavailable` and `Retry-After` (fail closed), their
settles are logged as `not recorded`. No request waits much past the busy timeout, and once
the lock is let go requests flow again in the same process.
Every answer's cost is in the key's spend except the settles the gateway logged as `not
recorded` (their batch could not commit: the documented window, during which the
reservation keeps holding the budget). No fd is leaked.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.faults.load import admin
from tests.faults.load import fd_count
from tests.faults.load import not_recorded
from tests.faults.load import run_load
from tests.faults.load import settled_fd_count
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e

MASTER = "sk-master-fault-sqlite"
CONCURRENCY = 128  # in flight at most (below the per-key stream limit)
RATE = 80.0  # requests started per second, answered or not
LOAD_S = 10.0
BUSY_TIMEOUT_S = 5.0  # gateway/store/sqlite_ledger.py
LOCK_AT_S, LOCK_FOR_S = 1.0, 6.5  # longer than the store's busy timeout
FD_SLACK = 8


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Path]]:
    fake = FakeOpenAI().start()
    tmp = tmp_path_factory.mktemp("gw-sqlite-fault")
    db = tmp / "gw.db"
    config = f"""
auth: {{master_key: {MASTER}}}
store: {{url: "sqlite:///{db}"}}
routing: {{deadline_s: 20}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: sk-up-fault}}]}}
models:
  - name: priced
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 2, output_per_mtok: 8}}
"""
    gateway = start_gateway(config, tmp)
    try:
        yield gateway, db
    finally:
        stop_gateway(gateway)
        fake.stop()


def hold_lock(db: Path, seconds: float, held: threading.Event) -> None:
    """What another program on the machine might do: take the write lock and sit on it."""
    conn = sqlite3.connect(db, timeout=10, isolation_level=None)
    try:
        conn.execute("BEGIN EXCLUSIVE")
        held.set()
        time.sleep(seconds)
        conn.execute("COMMIT")
    finally:
        conn.close()


async def test_sqlite_locked_under_load(
    rig: tuple[Gateway, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    gw, db = rig
    made = await admin(gw.url, MASTER, "POST", "/admin/keys", {"name": "f", "budget_usd": 100})
    # as many in flight as the fault will pile up: the idle pools reach their size first
    warm = await run_load(gw.url, made["key"], seconds=1.0, concurrency=CONCURRENCY)
    assert warm.outcomes["success"] == warm.requests > 0
    fds_before = fd_count(gw.proc.pid, gw.port)
    marks: dict[str, float] = {}

    async def fault() -> None:
        start = time.monotonic()
        await asyncio.sleep(LOCK_AT_S)
        held = threading.Event()
        holder = asyncio.create_task(asyncio.to_thread(hold_lock, db, LOCK_FOR_S, held))
        await asyncio.to_thread(held.wait, 10)
        marks["locked"] = time.monotonic() - start
        await holder
        marks["unlocked"] = time.monotonic() - start

    tally = await run_load(
        gw.url, made["key"], seconds=LOAD_S, concurrency=CONCURRENCY, fault=fault(), rate=RATE
    )
    fds_after = await settled_fd_count(gw.proc.pid, gw.port, fds_before + FD_SLACK)
    key = await admin(gw.url, MASTER, "GET", f"/admin/keys/{made['id']}")
    costs = {**warm.costs, **tally.costs}
    lost = not_recorded(gw.log) & set(costs)
    answered = sum(costs.values())
    acknowledged = answered - sum(costs[rid] for rid in lost)
    line = tally.line(
        "sqlite-locked",
        settle_not_recorded=len(lost),
        fds=f"{fds_before}->{fds_after}",
        leaks=max(0, fds_after - fds_before - FD_SLACK),
    )
    with capsys.disabled():
        print(f"\n{line}")

    assert tally.outcomes["hang"] == 0, line
    assert tally.outcomes["other_error"] == 0, f"{line}\n{tally.problems[:5]}"
    # the requests that arrived in the first busy timeout of the lock were refused
    assert tally.outcomes["store_error"] >= 50, f"the lock was not felt: {line}"
    assert tally.slowest_s < BUSY_TIMEOUT_S + 1.5, line
    after = [o for t, o in tally.timeline if t > marks["unlocked"] + 1.0]
    assert after, (marks, line)
    assert all(o == "success" for o in after), (marks, line)
    # a failed sqlite commit holds nothing: the spend is exactly the acknowledged settles
    assert key["spend_nanos"] == acknowledged, (acknowledged, key, answered)
    assert fds_after <= fds_before + FD_SLACK, line
    assert gw.proc.poll() is None
    assert "Traceback" not in gw.log.read_text()
