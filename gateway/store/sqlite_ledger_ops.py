"""The sqlite ledger's schema and statements: each function is one call's work inside a
transaction the SqliteLedger (gateway/store/sqlite_ledger.py) opened and will commit."""

from __future__ import annotations

import sqlite3

from gateway.store.ledger import WINDOW_S
from gateway.store.ledger import Admission
from gateway.store.ledger import Admitted
from gateway.store.ledger import CacheHits
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import SpendRow
from gateway.store.ledger import judge
from gateway.store.ledger import record_decoder
from gateway.store.ledger import window_of
from gateway.store.sqlite_kv import use_wal

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS vkeys (id TEXT PRIMARY KEY, secret_hash TEXT NOT NULL UNIQUE,"
    " record BLOB NOT NULL, created_at REAL NOT NULL)",
    # one b-tree (a rowid table with two indexes was three to write per reservation, and
    # a third of a request's store time); a key's holds are its requests in flight
    "CREATE TABLE IF NOT EXISTS holds (key_id TEXT NOT NULL, ticket TEXT NOT NULL,"
    " nanos INTEGER NOT NULL, expires_at REAL NOT NULL,"
    " PRIMARY KEY (key_id, ticket)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS rate_seconds (key_id TEXT NOT NULL, second INTEGER NOT NULL,"
    " requests INTEGER NOT NULL, tokens INTEGER NOT NULL,"
    " PRIMARY KEY (key_id, second)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS key_spend (key_id TEXT NOT NULL, window TEXT NOT NULL,"
    " nanos INTEGER NOT NULL, PRIMARY KEY (key_id, window)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS usage (key_id TEXT NOT NULL, model TEXT NOT NULL,"
    " nanos INTEGER NOT NULL, requests INTEGER NOT NULL, input_tokens INTEGER NOT NULL,"
    " output_tokens INTEGER NOT NULL, estimated INTEGER NOT NULL,"
    " PRIMARY KEY (key_id, model)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS cache_hits (key_id TEXT NOT NULL, model TEXT NOT NULL,"
    " hits INTEGER NOT NULL, saved_nanos INTEGER NOT NULL,"
    " PRIMARY KEY (key_id, model)) WITHOUT ROWID",
)
_ADD_SPEND = (
    "INSERT INTO key_spend (key_id, window, nanos) VALUES (?1, 'total', ?2)"
    " ON CONFLICT (key_id, window) DO UPDATE SET nanos = nanos + excluded.nanos"
)
# the same, to the total and a budget window (daily, weekly, monthly) at once
_ADD_SPEND_TO_WINDOW = (
    "INSERT INTO key_spend (key_id, window, nanos) VALUES (?1, 'total', ?2), (?1, ?3, ?2)"
    " ON CONFLICT (key_id, window) DO UPDATE SET nanos = nanos + excluded.nanos"
)
_ADD_RATE = (
    "INSERT INTO rate_seconds VALUES (?, ?, ?, ?) ON CONFLICT (key_id, second) DO UPDATE SET"
    " requests = requests + excluded.requests, tokens = tokens + excluded.tokens"
)
# a key's counters in one statement (each statement costs microseconds of its own): the
# requests and tokens in the rate window and the oldest second that counted each (summed by
# sqlite: a third of the time of summing a busy key's 60 rows in Python), the spend in the
# budget window, and what requests in flight hold
_KEY_STATE = (
    "SELECT COALESCE(SUM(requests), 0), COALESCE(SUM(tokens), 0),"
    " MIN(CASE WHEN requests > 0 THEN second END), MIN(CASE WHEN tokens > 0 THEN second END),"
    " (SELECT nanos FROM key_spend WHERE key_id = ?1 AND window = ?3),"
    " (SELECT COALESCE(SUM(nanos), 0) FROM holds WHERE key_id = ?1 AND expires_at > ?4)"
    " FROM rate_seconds WHERE key_id = ?1 AND second > ?2"
)
_ADD_USAGE = (
    "INSERT INTO usage VALUES (?, ?, ?, 1, ?, ?, ?) ON CONFLICT (key_id, model) DO UPDATE SET"
    " nanos = nanos + excluded.nanos, requests = requests + 1,"
    " input_tokens = input_tokens + excluded.input_tokens,"
    " output_tokens = output_tokens + excluded.output_tokens,"
    " estimated = estimated + excluded.estimated"
)


def connect(path: str, factory: type[sqlite3.Connection], timeout_s: float) -> sqlite3.Connection:
    conn = sqlite3.connect(
        path,
        timeout=timeout_s,
        isolation_level=None,
        factory=factory,
        check_same_thread=False,  # opened on the thread, used by one batch owner at a time
    )
    try:
        use_wal(conn, timeout_s)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA wal_autocheckpoint = 0")  # SqliteLedger._checkpoint does it
        conn.execute("BEGIN IMMEDIATE")
        for statement in _SCHEMA:
            conn.execute(statement)
        _migrate(conn)
        conn.execute("COMMIT")
    except BaseException:
        conn.close()  # which rolls back a transaction left open
        raise
    return conn


def find(conn: sqlite3.Connection, column: str, value: str) -> KeyRecord | None:
    # `column` is one of two literals chosen by this module, never input
    row = conn.execute(f"SELECT record FROM vkeys WHERE {column} = ?", (value,)).fetchone()
    return None if row is None else record_decoder.decode(row[0])


def spent(conn: sqlite3.Connection, key_id: str, window: str) -> int:
    row = conn.execute(
        "SELECT nanos FROM key_spend WHERE key_id = ? AND window = ?", (key_id, window)
    ).fetchone()
    return int(row[0]) if row is not None else 0


def held(conn: sqlite3.Connection, key_id: str, now: float) -> int:
    row = conn.execute(
        "SELECT COALESCE(SUM(nanos), 0) FROM holds WHERE key_id = ? AND expires_at > ?",
        (key_id, now),
    ).fetchone()
    return int(row[0])


def admit(conn: sqlite3.Connection, ask: Admission, swept: dict[str, int]) -> Admitted:
    """`swept`: the second each key's expired rows were last deleted (the caller's, kept
    across calls); the counters ignore expired rows, so deleting them once a second is
    enough to keep a key's window at most 60 rows."""
    record = ask.record or find(conn, "secret_hash", ask.secret_hash)
    if record is None:
        return Admitted(verdict="unknown")
    key_id, now = record.id, ask.now
    # one row per key and second: a window is at most 60 rows, whatever the rate
    horizon = int(now - WINDOW_S)
    if swept.get(key_id) != int(now):
        swept[key_id] = int(now)
        conn.execute("DELETE FROM rate_seconds WHERE key_id = ? AND second <= ?", (key_id, horizon))
        conn.execute("DELETE FROM holds WHERE key_id = ? AND expires_at <= ?", (key_id, now))
    window = window_of(record, ask.windows)
    count, used, oldest, first, spent_nanos, held_nanos = conn.execute(
        _KEY_STATE, (key_id, horizon, window, now)
    ).fetchone()
    verdict, retry = judge(
        record,
        ask,
        rpm_count=count,
        rpm_oldest=oldest,
        tpm_used=used,
        tpm_oldest=first,
        spent=spent_nanos or 0,
        held=held_nanos,
    )
    if verdict != "ok":
        return Admitted(verdict=verdict, record=record, retry_after_s=retry)
    if record.rpm is not None:
        conn.execute(_ADD_RATE, (key_id, int(now), 1, 0))
    reserved = ask.reserve_nanos if record.budget_nanos is not None else 0
    if reserved:
        conn.execute(
            "INSERT INTO holds VALUES (?, ?, ?, ?)",
            (key_id, ask.ticket, reserved, now + ask.hold_s),
        )
    return Admitted(verdict="ok", record=record, window=window, reserved_nanos=reserved)


def settle(conn: sqlite3.Connection, charge: Charge) -> None:
    key_id = charge.key_id
    if key_id:
        if charge.ticket:
            conn.execute(
                "DELETE FROM holds WHERE key_id = ? AND ticket = ?", (key_id, charge.ticket)
            )
        window = charge.window or "total"
        if window == "total":
            conn.execute(_ADD_SPEND, (key_id, charge.cost_nanos))
        else:
            conn.execute(_ADD_SPEND_TO_WINDOW, (key_id, charge.cost_nanos, window))
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


def count_hits(conn: sqlite3.Connection, hits: list[CacheHits]) -> None:
    conn.executemany(
        "INSERT INTO cache_hits VALUES (?1, ?2, ?3, ?4) ON CONFLICT (key_id, model)"
        " DO UPDATE SET hits = hits + ?3, saved_nanos = saved_nanos + ?4",
        [(h.key_id, h.model, h.hits, h.saved_nanos) for h in hits],
    )


def spend_rows(conn: sqlite3.Connection) -> list[SpendRow]:
    """Every key and model's usage, with its response-cache hits (a pair may have only one
    of the two)."""
    rows: dict[tuple[str, str], SpendRow] = {}
    for key_id, model, nanos, requests, input_tokens, output_tokens, estimated in conn.execute(
        "SELECT key_id, model, nanos, requests, input_tokens, output_tokens, estimated FROM usage"
    ):
        rows[(key_id, model)] = SpendRow(
            key_id=key_id,
            model=model,
            cost_nanos=nanos,
            requests=requests,
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            estimated=estimated,
        )
    for key_id, model, hits, saved in conn.execute(
        "SELECT key_id, model, hits, saved_nanos FROM cache_hits"
    ):
        row = rows.get((key_id, model))
        if row is None:
            row = rows[(key_id, model)] = SpendRow(key_id=key_id, model=model)
        row.cache_hits, row.cache_saved_nanos = hits, saved
    return [rows[k] for k in sorted(rows)]


def release(conn: sqlite3.Connection, key_id: str, ticket: str) -> None:
    conn.execute("DELETE FROM holds WHERE key_id = ? AND ticket = ?", (key_id, ticket))


def _migrate(conn: sqlite3.Connection) -> None:
    """A database of an earlier version: its reservations (a rowid table) move to `holds`.
    (Every process of the file restarts together: one that still ran the earlier version
    would no longer find its table.)"""
    old = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'reservations'")
    if old.fetchone() is not None:
        conn.execute(
            "INSERT OR IGNORE INTO holds SELECT key_id, ticket, nanos, expires_at FROM reservations"
        )
        conn.execute("DROP TABLE reservations")
