"""The sqlite request-log sink on a real file: idempotent writes, every search filter, cursor
paging through equal times, find by either id, chunked pruning, two processes writing one
file, and a file shared with another table (as the sqlite store's file is)."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path
from typing import Any

from gateway.observability import request_log_sqlite
from gateway.observability.request_entry import AttemptEntry
from gateway.observability.request_entry import RequestEntry
from gateway.observability.request_entry import RequestQuery
from gateway.observability.request_entry import decode_cursor
from gateway.observability.request_entry import encode_cursor
from gateway.observability.request_log_sqlite import SqliteRequestLog


def entry(i: int, at: float, **fields: Any) -> RequestEntry:
    base: dict[str, Any] = {
        "id": f"r{i:04d}",
        "time": at,
        "route": "/v1/chat/completions",
        "method": "POST",
        "status": 200,
        "duration_s": 0.25,
    }
    base.update(fields)
    return RequestEntry(**base)


async def opened(path: Path | str) -> SqliteRequestLog:
    sink = SqliteRequestLog(str(path))
    await sink.open()
    return sink


def ids(entries: list[RequestEntry]) -> list[str]:
    return [e.id for e in entries]


async def test_write_is_idempotent_and_keeps_the_whole_entry(tmp_path: Path) -> None:
    sink = await opened(tmp_path / "log.db")
    attempt = AttemptEntry(provider="p", key="#0", model="m", started=1.0, seconds=0.5, status=503)
    first = entry(1, 100.0, attempts=[attempt], request_body='{"a": 1}', cost_usd=0.01)
    await sink.write([first, entry(2, 101.0)])
    await sink.write([entry(1, 100.0, status=500), entry(2, 101.0)])
    found = await sink.search(RequestQuery())
    assert ids(found) == ["r0002", "r0001"]
    assert found[1] == first  # the first write stays; a rewrite adds nothing
    await sink.close()


async def test_a_batch_is_a_few_multi_row_statements_and_loses_no_row(tmp_path: Path) -> None:
    # one INSERT per ROWS_PER_INSERT rows (not one step per row: each let go of the GIL and
    # cost the event loop a thread switch), cut smaller when the connection allows fewer
    # variables; a row repeated, or already there, is kept once
    sink = await opened(tmp_path / "log.db")
    statements: list[str] = []

    def trace() -> None:
        sink._connection().set_trace_callback(statements.append)

    await sink._run(trace)
    await sink.write([entry(0, 1.0)])
    batch = [entry(i, float(i)) for i in range(1234)] + [entry(7, 7.0)]
    statements.clear()
    await sink.write(batch)
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert len(inserts) == 3  # 500 + 500 + 235
    found = await sink.search(RequestQuery(limit=1000))
    more = await sink.search(RequestQuery(limit=1000, before=(found[-1].time, found[-1].id)))
    assert sorted(ids(found + more)) == sorted(f"r{i:04d}" for i in range(1234))

    def few_variables() -> None:
        sink._connection().setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 20)

    await sink._run(few_variables)
    statements.clear()
    await sink.write([entry(i, float(i)) for i in range(2000, 2010)])
    assert len([s for s in statements if s.startswith("INSERT")]) == 5  # 2 rows of 8 each
    assert len(await sink.search(RequestQuery(since=2000.0))) == 10
    await sink.close()


async def test_every_filter(tmp_path: Path) -> None:
    sink = await opened(tmp_path / "log.db")
    await sink.write(
        [
            entry(1, 10.0, key_name="alice", key_id="k1", model="gpt", status=200),
            entry(2, 20.0, key_name="bob", key_id="k2", model="claude", status=404),
            entry(3, 30.0, key_name="alice", key_id="k1", model="claude", status=429),
            entry(4, 40.0, key_id="alice", model="gpt", status=503, client_request_id="x-1"),
            entry(5, 50.0, key_name="k2", key_id="k2", status=200, client_request_id="x-1"),
        ]
    )

    async def q(**kw: Any) -> list[str]:
        return ids(await sink.search(RequestQuery(**kw)))

    assert await q(key="alice") == ["r0004", "r0003", "r0001"]  # by name or by id
    assert await q(key="k2") == ["r0005", "r0002"]  # name and id both the key: once
    assert await q(model="claude") == ["r0003", "r0002"]
    assert await q(status=404) == ["r0002"]
    assert await q(status_class=4) == ["r0003", "r0002"]
    assert await q(status_class=2) == ["r0005", "r0001"]
    assert await q(request_id="x-1") == ["r0005", "r0004"]
    assert await q(request_id="r0002") == ["r0002"]
    assert await q(since=20.0) == ["r0005", "r0004", "r0003", "r0002"]  # inclusive
    assert await q(until=30.0) == ["r0002", "r0001"]  # exclusive
    assert await q(since=20.0, until=40.0, key="alice") == ["r0003"]
    assert await q(limit=2) == ["r0005", "r0004"]
    assert await q(before=(30.0, "r0003")) == ["r0002", "r0001"]
    assert await q(model="nothing") == []
    await sink.close()


async def test_paging_through_equal_times_loses_and_repeats_nothing(tmp_path: Path) -> None:
    sink = await opened(tmp_path / "log.db")
    rows = [entry(i, 1000.0 + i // 50, model="m" if i % 3 else "n") for i in range(500)]
    await sink.write(rows)
    for query in (RequestQuery(limit=7), RequestQuery(limit=7, model="m")):
        seen: list[str] = []
        for _ in range(200):
            page = await sink.search(query)
            seen += ids(page)
            if len(page) < query.limit:
                break
            cursor = decode_cursor(encode_cursor(page[-1]))
            assert cursor is not None
            query = RequestQuery(limit=query.limit, model=query.model, before=cursor)
        want = sorted(
            (e for e in rows if query.model is None or e.model == query.model),
            key=lambda e: (e.time, e.id),
            reverse=True,
        )
        assert seen == ids(want)
    await sink.close()


async def test_find_by_gateway_id_then_newest_client_id(tmp_path: Path) -> None:
    sink = await opened(tmp_path / "log.db")
    await sink.write(
        [
            entry(1, 10.0, client_request_id="dup"),
            entry(2, 20.0, client_request_id="dup"),
            entry(3, 5.0, client_request_id="r0001"),  # a client id equal to a gateway id
        ]
    )
    found = await sink.find("dup")
    assert found is not None
    assert found.id == "r0002"
    found = await sink.find("r0001")
    assert found is not None
    assert found.id == "r0001"
    assert await sink.find("nope") is None
    await sink.close()


async def test_prune_in_chunks(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(request_log_sqlite, "PRUNE_CHUNK", 7)
    sink = await opened(tmp_path / "log.db")
    await sink.write([entry(i, float(i)) for i in range(100)])
    assert await sink.prune(60.0) == 60
    left = await sink.search(RequestQuery(limit=1000))
    assert ids(left) == [f"r{i:04d}" for i in range(99, 59, -1)]
    assert await sink.prune(60.0) == 0
    await sink.close()


async def test_memory_database(tmp_path: Path) -> None:
    sink = await opened(":memory:")
    assert sink.label == "sqlite:memory"
    await sink.write([entry(1, 1.0)])
    assert ids(await sink.search(RequestQuery())) == ["r0001"]
    await sink.close()


async def test_shares_a_file_with_other_tables(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE kv (k TEXT PRIMARY KEY, v BLOB)")
    db.execute("INSERT INTO kv VALUES ('a', 'b')")
    db.commit()
    db.close()
    sink = await opened(path)
    await sink.write([entry(1, 1.0)])
    await sink.close()
    db = sqlite3.connect(path)
    assert db.execute("SELECT v FROM kv").fetchall() == [("b",)]
    assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    db.close()


def _writer(path: str, start: int, count: int) -> None:
    import asyncio

    async def run() -> None:
        sink = await opened(path)
        for i in range(start, start + count, 10):
            await sink.write([entry(j, float(j % 17)) for j in range(i, i + 10)])
        await sink.close()

    asyncio.run(run())


def _run_writers(path: str) -> list[int]:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, n * 1000, 300)) for n in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    return [p.exitcode if p.exitcode is not None else -1 for p in procs]


async def test_two_processes_write_one_file(tmp_path: Path) -> None:
    import asyncio

    path = str(tmp_path / "log.db")
    await (await opened(path)).close()  # the schema exists before both start
    codes = await asyncio.get_running_loop().run_in_executor(None, _run_writers, path)
    assert codes == [0, 0]
    sink = await opened(path)
    everything = await sink.search(RequestQuery(limit=1000))
    assert sorted(ids(everything)) == sorted(
        [f"r{i:04d}" for i in range(300)] + [f"r{i:04d}" for i in range(1000, 1300)]
    )
    await sink.close()


def _plan(path: Path, sql: str, args: list[Any]) -> str:
    db = sqlite3.connect(path)
    try:
        return " | ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, args))
    finally:
        db.close()


async def test_searches_use_the_partial_indexes_and_successes_skip_them(
    tmp_path: Path, monkeypatch: Any
) -> None:
    path = tmp_path / "log.db"
    sink = await opened(path)
    await sink.write(
        [entry(i, float(i), key_name="team", status=200) for i in range(50)]
        + [entry(100, 100.0, key_name="v", key_id="k9", status=503, client_request_id="c")]
    )
    plans: list[str] = []
    fetch = SqliteRequestLog._fetch

    def planned(self: SqliteRequestLog, sql: str, args: list[Any]) -> list[tuple[Any, ...]]:
        plans.append(_plan(path, sql, args))
        return fetch(self, sql, args)

    monkeypatch.setattr(SqliteRequestLog, "_fetch", planned)
    assert ids(await sink.search(RequestQuery(status=503))) == ["r0100"]
    assert ids(await sink.search(RequestQuery(status_class=5))) == ["r0100"]
    assert ids(await sink.search(RequestQuery(request_id="c"))) == ["r0100"]
    assert ids(await sink.search(RequestQuery(key="k9"))) == ["r0100"]
    assert len(await sink.search(RequestQuery(status=200, limit=100))) == 50
    await sink.close()
    assert "request_log_error_status" in plans[0]
    assert "request_log_error_status" in plans[1]
    assert "request_log_client_id_set" in plans[2]
    assert "request_log_key_id_set" in plans[3]
    assert "request_log_time" in plans[4]  # a success: read newest first, no index of its own
    db = sqlite3.connect(path)
    for index in ("error_status", "client_id_set", "key_id_set"):
        counted = db.execute(
            f"SELECT count(*) FROM request_log INDEXED BY request_log_{index} WHERE "
            + {
                "error_status": "status >= 400",
                "client_id_set": "client_request_id IS NOT NULL",
                "key_id_set": "key_id IS NOT NULL",
            }[index]
        ).fetchone()
        assert counted == (1,), index  # the 50 successes without a client id or key id: none
    db.close()


async def test_a_file_of_the_earlier_schema_gets_the_partial_indexes(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    db = sqlite3.connect(path)
    db.execute(request_log_sqlite.SCHEMA[0])
    for name, columns in [
        ("key_id", "key_id"),
        ("status", "status"),
        ("client_id", "client_request_id"),
    ]:
        db.execute(f"CREATE INDEX request_log_{name} ON request_log ({columns}, time DESC)")
    db.commit()
    db.close()
    sink = await opened(path)
    await sink.write([entry(1, 1.0, status=500)])
    assert ids(await sink.search(RequestQuery(status=500))) == ["r0001"]
    await sink.close()
    db = sqlite3.connect(path)
    names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
    db.close()
    assert not names & {"request_log_key_id", "request_log_status", "request_log_client_id"}
    assert {"request_log_error_status", "request_log_client_id_set"} <= names
