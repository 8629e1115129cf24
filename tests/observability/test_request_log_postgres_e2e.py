"""A real `gateway serve` logging to a real PostgreSQL (tests/postgres_server.py) under load.

PostgreSQL is killed (SIGKILL) in the middle of the load and started again on the same port
and data directory: every request must still succeed, what did not fit the queue meanwhile
is counted as dropped, the writer reaches the server again (records of requests made after
the restart are in the table), nothing is in it twice, and written + dropped is every
request. With `--workers 2` each worker writes its own records: each is there once.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import aiohttp

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.observability.test_workers import scrape
from tests.observability.test_workers import served_by
from tests.observability.test_workers import value
from tests.postgres_server import PostgresServer

CONCURRENCY = 16


def config(url: str, queue_max: int) -> str:
    return f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
request_log: {{sink: "{url}", flush_s: 0.05, batch_max: 20, queue_max: {queue_max}}}
providers:
  - {{name: mock, kind: mock}}
models:
  - {{name: fast, targets: [{{provider: mock, model: mock}}]}}
"""


async def load(
    gw: Gateway, names: list[str], pause_s: float, started: dict[str, float]
) -> list[int]:
    """One request per name (its x-request-id), CONCURRENCY at a time, each on a fresh
    connection (the kernel spreads those over the workers); their statuses."""
    todo = iter(names)
    statuses: list[int] = []
    body = {"model": "fast", "messages": [{"role": "user", "content": "hi"}]}
    connector = aiohttp.TCPConnector(force_close=True)
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def client() -> None:
            for name in todo:
                started[name] = time.monotonic()
                async with session.post(
                    gw.v1 + "/chat/completions", json=body, headers={"x-request-id": name}
                ) as response:
                    await response.read()
                    statuses.append(response.status)
                await asyncio.sleep(pause_s)

        await asyncio.gather(*(client() for _ in range(CONCURRENCY)))
    return statuses


def counts(gw: Gateway) -> tuple[float, float, float]:
    got = scrape(gw)
    return (
        value(got, "gateway_request_log_written_total"),
        value(got, "gateway_request_log_dropped_total"),
        value(got, "gateway_request_log_write_errors_total"),
    )


def wait_accounted(gw: Gateway, total: int, timeout: float = 20.0) -> tuple[float, float, float]:
    deadline = time.monotonic() + timeout
    while True:
        written, dropped, errors = counts(gw)
        if written + dropped >= total or time.monotonic() > deadline:
            return written, dropped, errors
        time.sleep(0.1)


def table(pg: PostgresServer) -> tuple[int, int, int, set[str]]:
    """Rows, distinct ids, distinct client ids, and the client ids."""
    rows = pg.psql(
        "SELECT count(*), count(DISTINCT id), count(DISTINCT client_request_id) FROM request_log"
    )
    n, ids, clients = (int(x) for x in rows.strip().split("|"))
    names = set(pg.psql("SELECT client_request_id FROM request_log").split())
    return n, ids, clients, names


def test_postgres_killed_under_load_then_back(tmp_path: Path) -> None:
    pg = PostgresServer().start()
    # a small queue: the outage overflows it, so drops happen and must be counted
    gw = start_gateway(config(pg.url, queue_max=40), tmp_path)
    try:
        names = [f"load-{i}" for i in range(300)]
        started: dict[str, float] = {}
        restarted_at: list[float] = []

        async def scenario() -> list[int]:
            running = asyncio.create_task(load(gw, names, 0.25, started))
            for _ in range(400):  # kill once 60 requests are under way
                if len(started) >= 60:
                    break
                await asyncio.sleep(0.01)
            await asyncio.to_thread(pg.kill)
            await asyncio.sleep(1.0)
            await asyncio.to_thread(pg.start)
            restarted_at.append(time.monotonic())
            return await running

        statuses = asyncio.run(scenario())
        assert statuses == [200] * 300
        assert len(started) == 300
        assert max(started.values()) > restarted_at[0] + 1.0
        written, dropped, errors = wait_accounted(gw, 300)
        assert written + dropped == 300
        assert dropped > 0
        assert errors > 0

        after = [f"after-{i}" for i in range(20)]  # the queue drained: every one is written
        assert asyncio.run(load(gw, after, 0.0, started)) == [200] * 20
        written, dropped, _ = wait_accounted(gw, 320)
        assert written + dropped == 320

        rows, ids, clients, logged = table(pg)
        assert rows == ids == clients == written  # nothing twice, nothing uncounted
        assert set(after) <= logged
        late = {n for n in names if started[n] > restarted_at[0]}
        assert late & logged  # records of the load after the restart reached the table
    finally:
        stop_gateway(gw)
        pg.close()


def test_two_workers_write_each_record_once(tmp_path: Path) -> None:
    pg = PostgresServer().start()
    gw = start_gateway(config(pg.url, queue_max=100_000), tmp_path, ["--workers", "2"])
    try:
        names = [f"w-{i}" for i in range(200)]
        assert asyncio.run(load(gw, names, 0.0, {})) == [200] * 200
        written, dropped, _ = wait_accounted(gw, 200)
        assert (written, dropped) == (200, 0)
        rows, ids, clients, logged = table(pg)
        assert rows == ids == clients == 200
        assert logged == set(names)
        assert len(served_by(gw.log)) == 2  # both workers served (and wrote) some
    finally:
        stop_gateway(gw)
        pg.close()
