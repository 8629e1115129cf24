"""The PostgreSQL request-log sink against a real PostgreSQL (tests/postgres_server.py): writes
(idempotent by id), every search filter, cursor paging through equal times, find by either
id, chunked pruning, values the columns cannot take as they are, a killed, a hung and a
refusing server, and a role with only the table privileges the docs list."""

from __future__ import annotations

import asyncio
import base64
import os
import signal
import time
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Coroutine
from collections.abc import Iterator
from typing import Any
from typing import TypeVar

import pytest

from gateway.observability import request_log_postgres
from gateway.observability.request_entry import AttemptEntry
from gateway.observability.request_entry import RequestEntry
from gateway.observability.request_entry import RequestQuery
from gateway.observability.request_log_postgres import PostgresLogError
from gateway.observability.request_log_postgres import PostgresRequestLog
from tests.postgres_server import PostgresServer
from tests.postgres_server import _children

T = TypeVar("T")


@pytest.fixture(scope="module")
def server() -> Iterator[PostgresServer]:
    pg = PostgresServer().start()
    try:
        yield pg
    finally:
        pg.close()


@pytest.fixture
def pg(server: PostgresServer) -> PostgresServer:
    server.psql("DROP TABLE IF EXISTS request_log; DROP ROLE IF EXISTS logwriter")
    return server


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


def run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def with_sink(url: str, work: Callable[[PostgresRequestLog], Awaitable[T]], **kw: float) -> T:
    sink = PostgresRequestLog(url, **kw)
    try:
        await sink.open()
        return await work(sink)
    finally:
        await sink.close()


def test_write_is_idempotent_and_keeps_every_field(pg: PostgresServer) -> None:
    full = entry(
        1,
        1700000000.123456789,
        client_request_id="client-1",
        key_name="team-a",
        key_id="k_1",
        model="gpt",
        provider="up",
        upstream_model="gpt-4o",
        stream=True,
        attempts=[
            AttemptEntry(
                provider="up",
                key="#0",
                model="gpt-4o",
                started=1.5,
                seconds=0.1,
                status=500,
                error="status_5xx",
            ),
            AttemptEntry(
                provider="up", key="#1", model="gpt-4o", started=1.6, seconds=0.2, status=200
            ),
        ],
        finish_reason="stop",
        input_tokens=10,
        output_tokens=20,
        cached_tokens=3,
        reasoning_tokens=4,
        cost_usd=0.0012,
        cache="miss",
        ttft_s=0.05,
        overhead_s=0.001,
        request_body='{"messages": []}',
        response_body='{"a": "\\u0000"}',
    )

    async def work(sink: PostgresRequestLog) -> list[RequestEntry]:
        await sink.write([full, entry(2, 1700000001.0)])
        await sink.write([entry(2, 1700000001.0), full, entry(3, 1700000002.0)])  # again
        await sink.write([entry(4, 1.0), entry(4, 1.0)])  # twice in one batch
        return await sink.search(RequestQuery())

    found = run(with_sink(pg.url, work))
    assert [e.id for e in found] == ["r0003", "r0002", "r0001", "r0004"]
    assert found[2] == full
    assert pg.psql("SELECT count(*), count(DISTINCT id) FROM request_log").strip() == "4|4"


def test_every_search_filter(pg: PostgresServer) -> None:
    rows = [
        entry(1, 100.0, key_name="a", key_id="ka", model="m1", status=200, client_request_id="x"),
        entry(2, 101.0, key_name="b", key_id="kb", model="m1", status=429),
        entry(3, 102.0, key_name="a", key_id="ka", model="m2", status=400, client_request_id="x"),
        entry(4, 103.0, key_name="b", key_id="kb", model="m2", status=500),
        entry(5, 104.0, key_name=None, model="m1", status=200),
        entry(6, 99.0, key_name="same", key_id="same", model="m3"),  # matches by both: once
    ]

    async def work(sink: PostgresRequestLog) -> dict[str, list[str]]:
        await sink.write(rows)
        queries = {
            "key name": RequestQuery(key="a"),
            "key id": RequestQuery(key="kb"),
            "key both": RequestQuery(key="same"),
            "model": RequestQuery(model="m1"),
            "status": RequestQuery(status=200),
            "class 4xx": RequestQuery(status_class=4),
            "class 5xx": RequestQuery(status_class=5),
            "client id": RequestQuery(request_id="x"),
            "gateway id": RequestQuery(request_id="r0004"),
            "since (inclusive)": RequestQuery(since=102.0),
            "until (exclusive)": RequestQuery(until=102.0),
            "combined": RequestQuery(key="a", model="m2", status_class=4, since=100, until=103),
            "limit": RequestQuery(limit=2),
            "nothing": RequestQuery(model="m9"),
        }
        return {name: [e.id for e in await sink.search(q)] for name, q in queries.items()}

    assert run(with_sink(pg.url, work)) == {
        "key name": ["r0003", "r0001"],
        "key id": ["r0004", "r0002"],
        "key both": ["r0006"],
        "model": ["r0005", "r0002", "r0001"],
        "status": ["r0005", "r0001", "r0006"],
        "class 4xx": ["r0003", "r0002"],
        "class 5xx": ["r0004"],
        "client id": ["r0003", "r0001"],
        "gateway id": ["r0004"],
        "since (inclusive)": ["r0005", "r0004", "r0003"],
        "until (exclusive)": ["r0002", "r0001", "r0006"],
        "combined": ["r0003"],
        "limit": ["r0005", "r0004"],
        "nothing": [],
    }


def test_cursor_pages_through_equal_times_once_each(pg: PostgresServer) -> None:
    # 40 records on 4 distinct times (10 on each), ids out of order: a page boundary falls
    # inside a run of equal times, where only the id tells the records apart
    rows = [entry((i * 7919) % 1000, 500.0 + (i % 4) * 0.1, model="m") for i in range(40)]
    expected = sorted(rows, key=lambda e: (e.time, e.id), reverse=True)

    async def work(sink: PostgresRequestLog) -> list[list[str]]:
        await sink.write(rows)
        pages: list[list[str]] = []
        before = None
        for _ in range(20):
            page = await sink.search(RequestQuery(model="m", limit=7, before=before))
            if not page:
                break
            pages.append([e.id for e in page])
            before = (page[-1].time, page[-1].id)
        return pages

    pages = run(with_sink(pg.url, work))
    assert [len(p) for p in pages] == [7, 7, 7, 7, 7, 5]
    assert [i for p in pages for i in p] == [e.id for e in expected]


def test_find_by_gateway_id_then_newest_client_id(pg: PostgresServer) -> None:
    async def work(sink: PostgresRequestLog) -> list[str | None]:
        await sink.write(
            [
                entry(1, 10.0, client_request_id="dup"),
                entry(2, 30.0, client_request_id="dup"),
                entry(3, 20.0, client_request_id="dup"),
                entry(4, 5.0, client_request_id="r0001"),  # a client id that is another's id
            ]
        )
        names = ["r0003", "dup", "r0001", "absent"]
        return [(found.id if (found := await sink.find(n)) else None) for n in names]

    assert run(with_sink(pg.url, work)) == ["r0003", "r0002", "r0001", None]


def test_prune_deletes_older_records_in_chunks(pg: PostgresServer) -> None:
    old = [entry(i, 1000.0 + i * 0.001) for i in range(12_000)]
    new = [entry(20_000 + i, 5000.0) for i in range(3)]

    async def work(sink: PostgresRequestLog) -> tuple[int, int, list[str]]:
        for start in range(0, len(old), 4000):
            await sink.write(old[start : start + 4000])
        await sink.write(new)
        gone = await sink.prune(5000.0)
        again = await sink.prune(5000.0)
        return gone, again, [e.id for e in await sink.search(RequestQuery())]

    assert request_log_postgres.PRUNE_CHUNK < 12_000  # more than one chunk
    gone, again, left = run(with_sink(pg.url, work))
    assert (gone, again) == (12_000, 0)
    assert left == ["r20002", "r20001", "r20000"]


def test_values_no_column_takes_as_they_are(pg: PostgresServer) -> None:
    # a client chooses the model name and x-request-id: a NUL or a 5000-character value must
    # neither fail the batch (and so block the writer) nor be found by another value
    # incompressible (an index compresses a long value before it measures it)
    prefix = base64.b64encode(os.urandom(4500)).decode()
    long_a, long_b = prefix + "a", prefix + "b"
    rows = [
        entry(1, 1.0, model="bad\x00name", client_request_id="c\x00"),
        entry(2, 2.0, model=long_a, client_request_id=prefix[:3000]),
        entry(3, 3.0, model=long_b),
    ]

    async def work(sink: PostgresRequestLog) -> list[object]:
        await sink.write(rows)
        nul = await sink.search(RequestQuery(model="bad\x00name"))
        by_long = await sink.search(RequestQuery(model=long_a))
        found = await sink.find(prefix[:3000])
        return [[e.model for e in nul], [e.id for e in by_long], found and found.id]

    assert run(with_sink(pg.url, work)) == [["bad\x00name"], ["r0002"], "r0002"]


def test_a_killed_server_fails_writes_then_is_written_to_again(pg: PostgresServer) -> None:
    async def work(sink: PostgresRequestLog) -> list[str]:
        await sink.write([entry(1, 1.0)])
        pg.kill()
        try:
            with pytest.raises(PostgresLogError) as failed:
                await sink.write([entry(2, 2.0)])
            assert pg.password not in str(failed.value)
        finally:
            pg.start()
        await sink.write([entry(2, 2.0), entry(3, 3.0)])  # the same sink: a new connection
        return [e.id for e in await sink.search(RequestQuery())]

    assert run(with_sink(pg.url, work)) == ["r0003", "r0002", "r0001"]


def test_a_hung_server_fails_the_call_within_its_timeout(pg: PostgresServer) -> None:
    assert pg._proc is not None
    postmaster = pg._proc.pid

    async def work(sink: PostgresRequestLog) -> float:
        await sink.write([entry(1, 1.0)])  # a connection is open and idle
        tree = [postmaster, *_children(postmaster)]  # its backend among them
        for pid in tree:
            os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        try:
            with pytest.raises(PostgresLogError, match="no answer"):
                await sink.write([entry(2, 2.0)])
            return time.monotonic() - started
        finally:
            for pid in tree:
                os.kill(pid, signal.SIGCONT)

    took = run(with_sink(pg.url, work, timeout_s=1.0))
    assert took < 3.0


def test_a_wrong_password_never_shows(pg: PostgresServer) -> None:
    url = pg.url.replace(pg.password, "hunter2-wrong")
    sink = PostgresRequestLog(url)
    assert "hunter2" not in sink.label
    assert pg.password not in sink.label

    async def work() -> str:
        with pytest.raises(PostgresLogError) as failed:
            await sink.write([entry(1, 1.0)])
        await sink.close()
        return str(failed.value)

    text = run(work())
    assert "hunter2" not in text
    assert "authentication" in text


def test_workers_opening_together_make_the_schema_once(pg: PostgresServer) -> None:
    async def work() -> None:
        sinks = [PostgresRequestLog(pg.url) for _ in range(4)]
        await asyncio.gather(*(s.open() for s in sinks))
        await asyncio.gather(*(s.write([entry(i, float(i))]) for i, s in enumerate(sinks)))
        for s in sinks:
            await s.close()

    run(work())
    assert pg.psql("SELECT count(*) FROM request_log").strip() == "4"
    indexes = pg.psql("SELECT indexname FROM pg_indexes WHERE tablename = 'request_log'")
    assert len(indexes.split()) == 7  # the primary key and six


def test_a_role_with_only_table_privileges_writes_searches_and_prunes(pg: PostgresServer) -> None:
    run(with_sink(pg.url, lambda sink: sink.write([entry(1, 1.0)])))  # the schema, made
    pg.psql(
        "CREATE ROLE logwriter LOGIN PASSWORD 'w-secret';"
        " GRANT SELECT, INSERT, DELETE ON request_log TO logwriter"
    )
    url = f"postgresql://logwriter:w-secret@127.0.0.1:{pg.port}/gateway"

    async def work(sink: PostgresRequestLog) -> tuple[int, list[str]]:
        await sink.write([entry(2, 2.0), entry(1, 1.0)])
        gone = await sink.prune(1.5)
        return gone, [e.id for e in await sink.search(RequestQuery())]

    assert run(with_sink(url, work)) == (1, ["r0002"])
    pg.psql("DROP TABLE request_log")
