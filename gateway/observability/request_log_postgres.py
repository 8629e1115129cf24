"""The request log in PostgreSQL (`request_log.sink: postgresql://...`): one table shared by
every worker and replica, written with asyncpg (docs/request-log.md, "PostgreSQL").

One row per record: the columns the admin search filters and orders on, and the whole entry
as `json` (not `jsonb`: jsonb refuses the `\\u0000` a client's body may carry, and one such
record would block the writer for good). A batch is one binary `COPY` (atomic, and the
cheapest write for both sides: 12-17 us of the server's CPU and 3-5 us of the gateway's a
record, against 15-20 and 5-8 for the INSERT below); a batch that COPY finds partly there
already (written again after a lost answer) is written with one multi-row `INSERT ... SELECT
FROM unnest(...) ON CONFLICT (id) DO NOTHING`, so it adds nothing twice. Pruning deletes in
bounded chunks by time, so no statement holds locks on millions of rows and a replica's prune
never blocks the writers long.

Connections are this module's own tiny pool: an idle connection is reused only after a call
on it succeeded; any failure (or a timeout) terminates it, so a server that was killed and
came back is reached on a fresh connection. Every call runs under a deadline: a hung server
makes a call fail in `timeout_s`, never hang the writer. The password never reaches a log or
an error: `label` has no userinfo, and error texts are scrubbed of it.
"""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any
from typing import TypeVar

import asyncpg  # type: ignore[import-untyped]
import msgspec

from gateway.config_observe import sink_label
from gateway.observability.request_entry import RequestEntry
from gateway.observability.request_entry import RequestQuery

T = TypeVar("T")
TABLE = "request_log"
TIMEOUT_S = 10.0  # the longest any one call (connect included) may take
MAX_IDLE = 2  # connections kept open between calls
MAX_OPEN = 4  # calls at once (the writer, and admin searches beside it)
PRUNE_CHUNK = 5000  # rows per DELETE
PRUNE_MAX_CHUNKS = 2000  # per prune: what is left waits for the next one (an hour later)
# Indexed text is cut to this many characters (a btree row must stay under ~2.7 kB, and a
# client picks the model name and x-request-id); the entry keeps the whole value, and a
# search for a longer value compares the entry's too.
INDEXED_CHARS = 200
_LOCK_KEY = 0x6777_7271  # the advisory lock two workers creating the schema at once share

SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
        id text COLLATE "C" PRIMARY KEY,
        time double precision NOT NULL,
        client_request_id text COLLATE "C",
        key_name text COLLATE "C",
        key_id text COLLATE "C",
        model text COLLATE "C",
        status integer NOT NULL,
        entry json NOT NULL)""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_time ON {TABLE} (time DESC, id DESC)",
    # each filter's index in the order of a page (time, then id), so a page of a filtered
    # search is read in order and stops at its limit, however many rows match
    f"CREATE INDEX IF NOT EXISTS {TABLE}_key_name ON {TABLE} (key_name, time DESC, id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_key_id ON {TABLE} (key_id, time DESC, id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_model ON {TABLE} (model, time DESC, id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_status ON {TABLE} (status, time DESC, id DESC)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_client_request_id ON {TABLE} (client_request_id)",
)
COLUMNS = ("id", "time", "client_request_id", "key_name", "key_id", "model", "status", "entry")
_INSERT = f"""INSERT INTO {TABLE} ({", ".join(COLUMNS)})
    SELECT * FROM unnest($1::text[], $2::float8[], $3::text[], $4::text[], $5::text[],
                         $6::text[], $7::int4[], $8::json[])
    ON CONFLICT (id) DO NOTHING"""
_PRUNE = f"""DELETE FROM {TABLE} WHERE id IN
    (SELECT id FROM {TABLE} WHERE time < $1 ORDER BY time LIMIT {PRUNE_CHUNK})"""

_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(RequestEntry).decode


class PostgresLogError(Exception):
    """A failure of the sink, its text free of the URL's password."""


def _column(value: str | None) -> str | None:
    # text columns refuse NUL; an oversized value would make the whole batch fail
    if value is None:
        return None
    if "\x00" in value:
        value = value.replace("\x00", "\ufffd")
    return value[:INDEXED_CHARS]


def _secrets_of(url: str) -> list[str]:
    parts = urllib.parse.urlsplit(url)
    found = [parts.password] if parts.password else []
    if parts.password:
        found.append(urllib.parse.unquote(parts.password))
    found.extend(urllib.parse.parse_qs(parts.query).get("password", []))
    return [secret for secret in found if secret]


def _where(conditions: list[str]) -> str:
    return " WHERE " + " AND ".join(conditions) if conditions else ""


class PostgresRequestLog:
    """The `RequestLogSink` of a postgresql:// URL (module docstring)."""

    def __init__(self, url: str, *, timeout_s: float = TIMEOUT_S) -> None:
        if url.startswith("postgres://"):
            url = "postgresql://" + url.removeprefix("postgres://")
        self._url = url
        self.label = sink_label(url)
        self._secrets = _secrets_of(url)
        self._timeout_s = timeout_s
        self._idle: list[asyncpg.Connection] = []
        self._slots = asyncio.Semaphore(MAX_OPEN)
        self._schema_ready = False
        self._closed = False

    async def open(self) -> None:
        await self._call(lambda conn: asyncio.sleep(0))

    async def write(self, entries: list[RequestEntry]) -> None:
        if not entries:
            return
        columns: tuple[list[Any], ...] = ([], [], [], [], [], [], [], [])
        ids, times, clients, names, key_ids, models, statuses, bodies = columns
        for entry in entries:
            ids.append(entry.id)
            times.append(entry.time)
            clients.append(_column(entry.client_request_id))
            names.append(_column(entry.key_name))
            key_ids.append(_column(entry.key_id))
            models.append(_column(entry.model))
            statuses.append(entry.status)
            bodies.append(_encode(entry).decode())

        async def insert(conn: asyncpg.Connection) -> None:
            try:
                await conn.copy_records_to_table(
                    TABLE,
                    records=zip(*columns, strict=True),
                    columns=COLUMNS,
                    timeout=self._timeout_s,
                )
            except asyncpg.UniqueViolationError:
                # a batch written again after its answer was lost: some of it is there
                await conn.execute(_INSERT, *columns, timeout=self._timeout_s)

        await self._call(insert)

    async def search(self, query: RequestQuery) -> list[RequestEntry]:
        where: list[str] = []
        args: list[Any] = []

        def arg(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        if query.model is not None:
            where.append(f"model = {arg(_column(query.model))}")
            if len(query.model) > INDEXED_CHARS:
                where.append(f"entry->>'model' = {arg(query.model)}")
        if query.status is not None:
            where.append(f"status = {arg(query.status)}")
        if query.status_class is not None:
            low = query.status_class * 100
            where.append(f"status >= {arg(low)} AND status < {arg(low + 100)}")
        if query.request_id is not None:
            rid = arg(_column(query.request_id))
            where.append(f"(client_request_id = {rid} OR id = {arg(query.request_id)})")
            if len(query.request_id) > INDEXED_CHARS:
                full = arg(query.request_id)
                where.append(f"(entry->>'client_request_id' = {full} OR id = {full})")
        if query.since is not None:
            where.append(f"time >= {arg(query.since)}")
        if query.until is not None:
            where.append(f"time < {arg(query.until)}")
        if query.before is not None:
            before_time, before_id = query.before
            where.append(f"(time, id) < ({arg(before_time)}, {arg(before_id)})")
        order = f" ORDER BY time DESC, id DESC LIMIT {arg(query.limit)}"
        if query.key is None:
            sql = f"SELECT entry FROM {TABLE}" + _where(where) + order
        else:
            # a key's name or its id: one ordered index scan each, merged (an OR of the two
            # would read and sort every row of the key before the first page)
            key = arg(_column(query.key))
            by_name, by_id = [*where, f"key_name = {key}"], [*where, f"key_id = {key}"]
            by_id.append(f"key_name IS DISTINCT FROM {key}")  # a row matching both: once
            if len(query.key) > INDEXED_CHARS:
                full = arg(query.key)
                by_name.append(f"entry->>'key_name' = {full}")
                by_id.append(f"entry->>'key_id' = {full}")
            pick = f"SELECT time, id, entry FROM {TABLE}"
            sql = (
                f"SELECT entry FROM (({pick}{_where(by_name)}{order})"
                f" UNION ALL ({pick}{_where(by_id)}{order})) AS by_key{order}"
            )

        async def fetch(conn: asyncpg.Connection) -> list[RequestEntry]:
            rows = await conn.fetch(sql, *args, timeout=self._timeout_s)
            return [_decode(row[0]) for row in rows]

        return await self._call(fetch)

    async def find(self, request_id: str) -> RequestEntry | None:
        async def fetch(conn: asyncpg.Connection) -> RequestEntry | None:
            text = await conn.fetchval(
                f"SELECT entry FROM {TABLE} WHERE id = $1", request_id, timeout=self._timeout_s
            )
            if text is None:
                sql = f"SELECT entry FROM {TABLE} WHERE client_request_id = $1"
                args: list[Any] = [_column(request_id)]
                if len(request_id) > INDEXED_CHARS:
                    sql += " AND entry->>'client_request_id' = $2"
                    args.append(request_id)
                sql += " ORDER BY time DESC, id DESC LIMIT 1"
                text = await conn.fetchval(sql, *args, timeout=self._timeout_s)
            return None if text is None else _decode(text)

        return await self._call(fetch)

    async def prune(self, before: float) -> int:
        gone = 0
        for _ in range(PRUNE_MAX_CHUNKS):
            status: str = await self._call(
                lambda conn: conn.execute(_PRUNE, before, timeout=self._timeout_s)
            )
            count = int(status.rpartition(" ")[2])  # "DELETE <n>"
            gone += count
            if count < PRUNE_CHUNK:
                break
        return gone

    async def close(self) -> None:
        self._closed = True
        idle, self._idle = self._idle, []
        for conn in idle:
            try:
                await asyncio.wait_for(conn.close(), self._timeout_s)
            except Exception:
                conn.terminate()

    async def _call(self, work: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
        """`work` on a connection (an idle one, or a new one), within the call's deadline."""
        if self._closed:
            raise PostgresLogError(f"request log {self.label} is closed")
        async with self._slots:
            conn = self._idle.pop() if self._idle else None
            try:
                async with asyncio.timeout(self._timeout_s):
                    if conn is None:
                        conn = await self._connect()
                    if not self._schema_ready:
                        await self._create_schema(conn)
                    result = await work(conn)
            except BaseException as exc:
                if conn is not None:
                    conn.terminate()  # never reused: its state after a failure is unknown
                if isinstance(exc, asyncpg.UndefinedTableError):
                    self._schema_ready = False  # dropped under us: made again on the next call
                if isinstance(exc, Exception):
                    raise self._error(exc) from None
                raise
            if self._closed or len(self._idle) >= MAX_IDLE:
                conn.terminate()
            else:
                self._idle.append(conn)
            return result

    async def _connect(self) -> asyncpg.Connection:
        conn: asyncpg.Connection = await asyncpg.connect(
            self._url, timeout=self._timeout_s, command_timeout=self._timeout_s
        )
        return conn

    async def _create_schema(self, conn: asyncpg.Connection) -> None:
        # A table already there is used as it is: a role with only SELECT, INSERT and DELETE
        # on a table the operator made works (CREATE ... IF NOT EXISTS would still need CREATE).
        exists = await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", TABLE)
        if not exists:
            async with conn.transaction():
                # workers and replicas starting together: one makes it, the others wait
                await conn.execute("SELECT pg_advisory_xact_lock($1)", _LOCK_KEY)
                for statement in SCHEMA:
                    await conn.execute(statement)
        self._schema_ready = True

    def _error(self, exc: Exception) -> PostgresLogError:
        if isinstance(exc, TimeoutError):
            text = f"no answer from {self.label} within {self._timeout_s:g}s"
        else:
            text = f"{type(exc).__name__}: {exc}"
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return PostgresLogError(text)
