"""The request log in sqlite (`request_log.sink: store` with the sqlite store, or
`sqlite:///PATH`): a table of its own, in the store's file or a file of its own; with the
memory store, a database in this process's memory.

sqlite is blocking: every call runs on this sink's one worker thread (its own connection,
made there), never on the event loop. The file is in WAL mode with a busy timeout, so the
writers of several `--workers` and the admin routes' readers share it. One row per record:
the columns the admin search filters and orders on, and the whole entry as msgspec JSON. A
batch is one transaction of multi-row `INSERT OR IGNORE` statements (written again after a
failure, it adds nothing twice). Pruning deletes in bounded chunks by time.
"""

from __future__ import annotations

import asyncio
import functools
import sqlite3
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from typing import TypeVar

import msgspec

from gateway.observability.request_entry import RequestEntry
from gateway.observability.request_entry import RequestQuery
from gateway.store.sqlite_kv import use_wal

T = TypeVar("T")
TABLE = "request_log"
BUSY_TIMEOUT_MS = 5000
PRUNE_CHUNK = 5000
PRUNE_MAX_CHUNKS = 200

SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        id TEXT PRIMARY KEY,
        time REAL NOT NULL,
        client_request_id TEXT,
        key_name TEXT,
        key_id TEXT,
        model TEXT,
        status INTEGER NOT NULL,
        entry BLOB NOT NULL)""",
    # the indexes of an earlier schema, full where these are partial
    f"DROP INDEX IF EXISTS {TABLE}_key_id",
    f"DROP INDEX IF EXISTS {TABLE}_status",
    f"DROP INDEX IF EXISTS {TABLE}_client_id",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_time ON {TABLE} (time DESC, id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_key_name ON {TABLE} (key_name, time DESC, id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_model ON {TABLE} (model, time DESC, id DESC)",
    # Partial: most rows (a static key's, a success, no client id) add nothing to these; a
    # search names the index's condition (ERROR_STATUS below) or implies it (`col = ?`).
    f"CREATE INDEX IF NOT EXISTS {TABLE}_key_id_set ON {TABLE} (key_id, time DESC, id DESC)"
    " WHERE key_id IS NOT NULL",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_error_status ON {TABLE} (status, time DESC, id DESC)"
    " WHERE status >= 400",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_client_id_set ON {TABLE} (client_request_id, time DESC)"
    " WHERE client_request_id IS NOT NULL",
)
ERROR_STATUS = 400  # the least status of the status index
COLUMNS = 8
# Rows per INSERT statement. One statement per batch, not executemany: the sqlite3 module
# lets go of the GIL around every step, and each row's step taken back from a busy event
# loop cost the loop a thread switch (measured: 58 us of the loop's CPU per record at 16
# connections; one statement of 500 rows switches once). docs/request-log.md, "sqlite".
ROWS_PER_INSERT = 500
_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(RequestEntry)


@functools.lru_cache(maxsize=64)
def _insert_of(rows: int) -> str:
    values = ",".join(["(?, ?, ?, ?, ?, ?, ?, ?)"] * rows)
    return f"INSERT OR IGNORE INTO {TABLE} VALUES {values}"


class SqliteRequestLog:
    """A `RequestLogSink` on one sqlite file (or `:memory:`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.label = "sqlite:" + ("memory" if path == ":memory:" else path)
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="request-log-sqlite")
        self._db: sqlite3.Connection | None = None  # made and used on the thread only

    async def _run(self, work: Any, *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._thread, work, *args)

    def _connection(self) -> sqlite3.Connection:
        db = self._db
        if db is None:
            db = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            if self.path != ":memory:":
                use_wal(db, BUSY_TIMEOUT_MS / 1000)
                db.execute("PRAGMA synchronous=NORMAL")
            for statement in SCHEMA:
                db.execute(statement)
            self._db = db
        return db

    async def open(self) -> None:
        await self._run(self._connection)

    async def write(self, entries: list[RequestEntry]) -> None:
        rows = [
            (
                e.id,
                e.time,
                e.client_request_id,
                e.key_name,
                e.key_id,
                e.model,
                e.status,
                _encoder.encode(e),
            )
            for e in entries
        ]
        await self._run(self._write, rows)

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        db = self._connection()
        per_statement = max(1, db.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // COLUMNS)
        per_statement = min(per_statement, ROWS_PER_INSERT)
        db.execute("BEGIN IMMEDIATE")
        try:
            for at in range(0, len(rows), per_statement):
                chunk = rows[at : at + per_statement]
                db.execute(_insert_of(len(chunk)), [value for row in chunk for value in row])
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    async def search(self, query: RequestQuery) -> list[RequestEntry]:
        conditions: list[str] = []
        args: list[Any] = []
        if query.key is not None:
            conditions.append("(key_name = ? OR key_id = ?)")
            args += [query.key, query.key]
        if query.model is not None:
            conditions.append("model = ?")
            args.append(query.model)
        if query.status is not None:
            conditions.append("status = ?")
            args.append(query.status)
        if query.status_class is not None:
            conditions.append("status >= ? AND status < ?")
            args += [query.status_class * 100, query.status_class * 100 + 100]
        least = query.status if query.status is not None else (query.status_class or 0) * 100
        if least >= ERROR_STATUS:  # the partial index's own condition, word for word
            conditions.append(f"status >= {ERROR_STATUS}")
        if query.request_id is not None:
            conditions.append("(client_request_id = ? OR id = ?)")
            args += [query.request_id, query.request_id]
        if query.since is not None:
            conditions.append("time >= ?")
            args.append(query.since)
        if query.until is not None:
            conditions.append("time < ?")
            args.append(query.until)
        if query.before is not None:
            conditions.append("(time < ? OR (time = ? AND id < ?))")
            args += [query.before[0], query.before[0], query.before[1]]
        where = (" WHERE " + " AND ".join(conditions)) if conditions else ""
        sql = f"SELECT entry FROM {TABLE}{where} ORDER BY time DESC, id DESC LIMIT ?"
        args.append(query.limit)
        rows = await self._run(self._fetch, sql, args)
        return [_decoder.decode(row[0]) for row in rows]

    def _fetch(self, sql: str, args: list[Any]) -> list[tuple[Any, ...]]:
        return self._connection().execute(sql, args).fetchall()

    async def find(self, request_id: str) -> RequestEntry | None:
        blob = await self._run(self._find, request_id)
        return None if blob is None else _decoder.decode(blob)

    def _find(self, request_id: str) -> bytes | None:
        # The gateway's id wins over a client's x-request-id that happens to equal it.
        db = self._connection()
        row = db.execute(f"SELECT entry FROM {TABLE} WHERE id = ?", [request_id]).fetchone()
        if row is None:
            row = db.execute(
                f"SELECT entry FROM {TABLE} WHERE client_request_id = ? "
                "ORDER BY time DESC, id DESC LIMIT 1",
                [request_id],
            ).fetchone()
        return None if row is None else bytes(row[0])

    async def prune(self, before: float) -> int:
        result: int = await self._run(self._prune, before)
        return result

    def _prune(self, before: float) -> int:
        db, gone = self._connection(), 0
        for _ in range(PRUNE_MAX_CHUNKS):
            cursor = db.execute(
                f"DELETE FROM {TABLE} WHERE id IN "
                f"(SELECT id FROM {TABLE} WHERE time < ? LIMIT {PRUNE_CHUNK})",
                [before],
            )
            gone += cursor.rowcount
            if cursor.rowcount < PRUNE_CHUNK:
                break
        return gone

    async def close(self) -> None:
        def shut() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await self._run(shut)
        self._thread.shutdown(wait=False)
