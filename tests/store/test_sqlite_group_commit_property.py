"""Group commit changes nothing but speed: a seeded random mix of every ledger call, made
all at once (so that they run in shared transactions), gives each call the answer and
leaves the database in the state that the same calls made one by one do."""

from __future__ import annotations

import asyncio
import random
import sqlite3
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest

from gateway.accounting.keys import budget_windows
from gateway.store.ledger import Admission
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.sqlite_ledger import SqliteLedger
from tests.store.test_sqlite_group_commit import Probe
from tests.store.test_sqlite_group_commit import in_one_batch

NOW = 1_764_000_000.0
CALLS = 400
Call = Callable[[SqliteLedger], Awaitable[Any]]

KEYS = [
    KeyRecord(id="k1", name="a", secret_hash="h1", budget_nanos=6000),
    KeyRecord(id="k2", name="b", secret_hash="h2", budget_nanos=4000, budget_period="daily", rpm=6),
    KeyRecord(id="k3", name="c", secret_hash="h3", tpm=300, models=["m"], expires_at=NOW + 120),
    KeyRecord(id="k4", name="d", secret_hash="h4"),
]
TABLES = {
    "vkeys": "id, secret_hash, record",
    "holds": "key_id, ticket, nanos, expires_at",
    "rate_seconds": "key_id, second, requests, tokens",
    "key_spend": "key_id, window, nanos",
    "usage": "key_id, model, nanos, requests, input_tokens, output_tokens, estimated",
}


def random_calls(seed: int) -> list[Call]:
    """Admissions (of the keys, an unknown one, static records), settles and releases of
    earlier and unknown tickets, master-key settles, key creation (some duplicates),
    revocation and every read; time advances so windows slide and reservations expire."""
    rng = random.Random(seed)
    calls: list[Call] = []
    tickets: list[tuple[str, str]] = [("nobody", "k1")]  # (ticket, key id)
    for i in range(CALLS):
        now = NOW + i * 0.4
        windows = budget_windows(now)
        roll = rng.random()
        if i == CALLS * 3 // 4:  # late: k1's budget is reached first
            calls.append(lambda ledger: ledger.revoke_key("k1"))
        elif roll < 0.4:
            record = rng.choice([*KEYS, None])
            hash_ = record.secret_hash if record else "unknown"
            ticket = f"t{i}"
            tickets.append((ticket, record.id if record else "k1"))
            ask = Admission(
                ticket=ticket,
                now=now,
                model=rng.choice(["m", "m", "x"]),
                reserve_nanos=rng.randrange(0, 900),
                tokens=rng.randrange(0, 200),
                hold_s=rng.choice([15.0, 600.0]),
                windows=windows,
                secret_hash="" if record is KEYS[3] else hash_,
                record=KEYS[3] if record is KEYS[3] else None,  # a static key
            )
            calls.append(lambda ledger, ask=ask: ledger.admit(ask))
        elif roll < 0.7:
            ticket, key_id = rng.choice(tickets)
            master = rng.random() < 0.2
            charge = Charge(
                key_id="" if master else key_id,
                model=rng.choice(["up/m", "up/x"]),
                cost_nanos=rng.randrange(0, 800),
                input_tokens=rng.randrange(0, 100),
                output_tokens=rng.randrange(0, 100),
                estimated=rng.random() < 0.2,
                now=now + rng.random(),
                ticket="" if master else ticket,
                window=windows["daily"] if key_id == "k2" else "total",
            )
            calls.append(lambda ledger, charge=charge: ledger.settle(charge))
        elif roll < 0.8:
            ticket, key_id = rng.choice(tickets)
            calls.append(lambda ledger, t=ticket, k=key_id: ledger.release(k, t, 1))
        elif roll < 0.85:
            new = KeyRecord(id=rng.choice(["k1", f"n{i}"]), name="n", secret_hash=f"hn{i}")
            calls.append(lambda ledger, new=new: ledger.create_key(new))
        elif roll < 0.87:
            key_id = "k1" if i >= CALLS * 3 // 4 else rng.choice(["k4", "none"])
            calls.append(lambda ledger, k=key_id: ledger.revoke_key(k))
        else:
            calls.append(rng.choice(_reads(now)))
    return calls


def _reads(now: float) -> list[Call]:
    return [
        lambda ledger: ledger.key_spend("k1", "total", now),
        lambda ledger: ledger.key_spend("k2", budget_windows(now)["daily"], now),
        lambda ledger: ledger.find_key("h2"),
        lambda ledger: ledger.get_key("k3"),
        lambda ledger: ledger.list_keys(),
        lambda ledger: ledger.spend(),
    ]


def outcome(result: Any) -> Any:
    """A result, comparable across two databases (errors name their file)."""
    if isinstance(result, BaseException):
        return type(result).__name__, str(result).rpartition(": ")[2]
    return msgspec.to_builtins(result)


def state(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    conn = sqlite3.connect(path)
    try:
        return {
            table: conn.execute(f"SELECT {columns} FROM {table} ORDER BY {columns}").fetchall()
            for table, columns in TABLES.items()
        }
    finally:
        conn.close()


async def one_by_one(path: Path, calls: list[Call]) -> list[Any]:
    ledger = SqliteLedger(str(path))
    try:
        for record in KEYS[:3]:
            await ledger.create_key(record)
        results = []
        for call in calls:
            try:
                results.append(await call(ledger))
            except Exception as exc:
                results.append(exc)
        return results
    finally:
        await ledger.close()


async def all_at_once(
    path: Path, calls: list[Call], *, held: bool, on_loop: bool
) -> tuple[list[Any], Probe]:
    """Every call queued before the first runs (`held`, on the store's thread), or as they
    come (batches committed on the event loop, or on the thread)."""
    probe = Probe()
    ledger = SqliteLedger(str(path), factory=probe.factory(), on_loop=on_loop)
    try:
        for record in KEYS[:3]:
            await ledger.create_key(record)
        bound = [lambda call=call: call(ledger) for call in calls]
        if held:
            return await in_one_batch(ledger, probe, bound), probe
        return await asyncio.gather(*(c() for c in bound), return_exceptions=True), probe
    finally:
        probe.resume.set()
        await ledger.close()


@pytest.mark.parametrize(
    ("held", "on_loop"),
    [(True, False), (False, False), (False, True)],
    ids=["held", "as-they-come", "as-they-come-on-loop"],
)
@pytest.mark.parametrize("seed", range(4))
async def test_calls_at_once_equal_calls_one_by_one(
    seed: int, held: bool, on_loop: bool, tmp_path: Path
) -> None:
    calls = random_calls(seed)
    expected = await one_by_one(tmp_path / "alone.db", calls)
    results, probe = await all_at_once(tmp_path / "grouped.db", calls, held=held, on_loop=on_loop)
    assert max(probe.batches()) >= (256 if held else 10)  # they did share transactions
    assert [outcome(r) for r in results] == [outcome(r) for r in expected]
    assert state(tmp_path / "grouped.db") == state(tmp_path / "alone.db")
    verdicts = {r.verdict for r in expected if hasattr(r, "verdict")}
    errors = {type(r).__name__ for r in expected if isinstance(r, Exception)}
    # the mix reaches every verdict it can and the constraint error
    assert verdicts == {"ok", "unknown", "revoked", "expired", "model", "rpm", "tpm", "budget"}
    assert errors == {"StoreUnavailable"}
