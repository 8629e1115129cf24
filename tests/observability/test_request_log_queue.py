"""The request log's queue and writer (gateway/observability/request_log.py) with a sink of
the test's own that can be made to fail: a full queue drops and counts, a failed batch is
written again before anything newer, shutdown flushes within its grace."""

from __future__ import annotations

import asyncio

from gateway.config_observe import RequestLogConfig
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_entry import RequestEntry
from gateway.observability.request_entry import RequestQuery
from gateway.observability.request_log import RequestLog


class ListSink:
    """Keeps what it is given, by id (as the real sinks: a rewrite adds nothing)."""

    label = "list"

    def __init__(self) -> None:
        self.rows: dict[str, RequestEntry] = {}
        self.order: list[str] = []
        self.failing = False
        self.writes = 0

    async def open(self) -> None:
        pass

    async def write(self, entries: list[RequestEntry]) -> None:
        self.writes += 1
        if self.failing:
            raise ConnectionError("sink down")
        for entry in entries:
            if entry.id not in self.rows:
                self.rows[entry.id] = entry
                self.order.append(entry.id)

    async def search(self, query: RequestQuery) -> list[RequestEntry]:
        return []

    async def find(self, request_id: str) -> RequestEntry | None:
        return self.rows.get(request_id)

    async def prune(self, before: float) -> int:
        return 0

    async def close(self) -> None:
        pass


def entry(n: int) -> RequestEntry:
    return RequestEntry(
        id=f"r{n:05d}",
        time=1.0 + n,
        route="/v1/chat/completions",
        method="POST",
        status=200,
        duration_s=0.01,
    )


def value(metrics: GatewayMetrics, name: str) -> float:
    for line in metrics.exposition().decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(name)


async def test_a_full_queue_drops_and_counts_and_the_rest_is_written_in_order() -> None:
    metrics = GatewayMetrics(models=frozenset())
    sink = ListSink()
    log = RequestLog(RequestLogConfig(queue_max=50, batch_max=20, flush_s=0.05), sink, metrics)
    for n in range(80):
        log.offer(entry(n))  # before the writer runs: 30 do not fit
    assert value(metrics, "gateway_request_log_dropped_total") == 30
    await log.start()
    for _ in range(100):
        if len(sink.rows) == 50:
            break
        await asyncio.sleep(0.02)
    await log.stop(1.0)
    assert sink.order == [f"r{n:05d}" for n in range(50)]
    assert value(metrics, "gateway_request_log_written_total") == 50


async def test_a_failed_batch_is_written_again_before_newer_records() -> None:
    metrics = GatewayMetrics(models=frozenset())
    sink = ListSink()
    log = RequestLog(RequestLogConfig(batch_max=10, flush_s=0.05), sink, metrics)
    await log.start()
    sink.failing = True
    for n in range(15):
        log.offer(entry(n))
    for _ in range(100):
        if sink.writes >= 2:
            break
        await asyncio.sleep(0.05)
    assert not sink.rows
    assert value(metrics, "gateway_request_log_write_errors_total") >= 1
    for n in range(15, 25):
        log.offer(entry(n))  # queued behind the held batch
    sink.failing = False
    for _ in range(200):
        if len(sink.rows) == 25:
            break
        await asyncio.sleep(0.05)
    await log.stop(1.0)
    assert sink.order == [f"r{n:05d}" for n in range(25)]
    assert value(metrics, "gateway_request_log_dropped_total") == 0


async def test_stop_flushes_what_is_queued_and_counts_what_it_cannot() -> None:
    metrics = GatewayMetrics(models=frozenset())
    sink = ListSink()
    log = RequestLog(RequestLogConfig(batch_max=1000, flush_s=30), sink, metrics)
    await log.start()
    for n in range(7):
        log.offer(entry(n))
    await log.stop(1.0)  # long before the next flush
    assert len(sink.rows) == 7
    down = ListSink()
    down.failing = True
    log = RequestLog(RequestLogConfig(flush_s=30), down, metrics)
    await log.start()
    for n in range(3):
        log.offer(entry(n))
    await log.stop(0.2)
    assert value(metrics, "gateway_request_log_dropped_total") == 3
