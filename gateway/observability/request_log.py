"""The request log's queue and writer: records handed over where a request ends, written to
the sink in batches by one task per process (docs/request-log.md).

The request path only calls `RequestLog.offer`: an append to a bounded deque, no await, no
I/O. What does not fit (`queue_max` records waiting, counting a batch held for a retry) is
dropped and counted (`gateway_request_log_dropped_total`): a slow or dead sink never slows
or fails a request. The writer wakes every `flush_s`, or as soon as a batch is full, and
writes up to `batch_max` records at a time. A batch that fails is kept and written again,
after a backoff (0.5 s doubling to 10 s), before anything newer: the sink's writes are
idempotent by record id, so a batch the sink took before it failed to answer is not
duplicated. Records older than `retention_days` are pruned at start and every hour.

With `--workers N` each worker has its own writer and writes only the records of the requests
it served, so each record is written once; records of several replicas meet in PostgreSQL.
On shutdown the writer flushes what is queued within `server.shutdown_grace_s` (what is
left then is counted as dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncIterator

from aiohttp import web

from gateway.config_observe import STORE_SINK
from gateway.config_observe import RequestLogConfig
from gateway.config_observe import is_postgres_sink
from gateway.observability.access import RequestRecord
from gateway.observability.logs import redact
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.request_entry import RequestEntry
from gateway.observability.request_entry import RequestLogSink
from gateway.server.state import STATE

log = logging.getLogger("gateway.request_log")
PRUNE_EVERY_S = 3600.0
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 10.0
DAY_S = 86400.0


def make_sink(config: RequestLogConfig, store_url: str) -> RequestLogSink:
    """The sink `config.sink` names; `store` is the sqlite store's own file (the memory
    store: a database in this process's memory)."""
    sink = config.sink
    if is_postgres_sink(sink):
        from gateway.observability.request_log_postgres import PostgresRequestLog

        return PostgresRequestLog(sink)
    from gateway.observability.request_log_sqlite import SqliteRequestLog

    if sink == STORE_SINK:
        if store_url.startswith("sqlite:///"):
            return SqliteRequestLog(store_url.removeprefix("sqlite:///"))
        return SqliteRequestLog(":memory:")
    return SqliteRequestLog(sink.removeprefix("sqlite:///"))


class RequestLog:
    """One process's queue of records and the task that writes them (module docstring)."""

    __slots__ = (
        "_backoff",
        "_config",
        "_dropped",
        "_errors",
        "_held",
        "_lag",
        "_queue",
        "_queued",
        "_task",
        "_wake",
        "_written",
        "sink",
    )

    def __init__(
        self, config: RequestLogConfig, sink: RequestLogSink, metrics: GatewayMetrics
    ) -> None:
        self._config = config
        self.sink = sink
        self._queue: deque[tuple[float, RequestEntry]] = deque()  # (perf_counter ended, entry)
        self._held: list[tuple[float, RequestEntry]] = []  # a batch that failed, kept for a retry
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._backoff = 0.0
        self._dropped = metrics.request_log_dropped.counter()
        self._written = metrics.request_log_written.counter()
        self._errors = metrics.request_log_errors.counter()
        self._queued = metrics.request_log_queue.gauge()
        self._lag = metrics.request_log_lag.histogram()

    @property
    def pending(self) -> int:
        return len(self._queue) + len(self._held)

    def offer(self, entry: RequestEntry) -> None:
        """Queue `entry` for the sink, or drop it (counted) when the queue is full."""
        queue = self._queue
        if len(queue) + len(self._held) >= self._config.queue_max:
            self._dropped.inc()
            return
        queue.append((time.perf_counter(), entry))
        if len(queue) == self._config.batch_max:
            self._wake.set()

    async def start(self) -> None:
        try:
            await self.sink.open()
        except Exception as exc:  # a sink down at start comes back later: records queue
            log.warning("request log: sink %s not reachable at start: %s", self.sink.label, exc)
        self._task = asyncio.create_task(self._run(), name="request-log-writer")

    async def stop(self, grace_s: float) -> None:
        """Write what is queued (within `grace_s`), then close the sink."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        deadline = time.monotonic() + grace_s
        while self.pending and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(self._write_once(), max(deadline - time.monotonic(), 0.01))
            except Exception:
                break
        left = self.pending
        if left:
            log.warning("request log: %d records not written before shutdown", left)
            self._dropped.inc(left)
            self._queue.clear()
            self._held.clear()
            self._queued.set(0)
        with contextlib.suppress(Exception):
            await self.sink.close()

    async def _run(self) -> None:
        flush_s = self._config.flush_s
        next_prune = 0.0
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), flush_s)
            self._wake.clear()
            if time.monotonic() >= next_prune:
                next_prune = time.monotonic() + PRUNE_EVERY_S
                await self._prune()
            while self.pending:
                try:
                    await self._write_once()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._errors.inc()
                    self._backoff = min(max(self._backoff * 2, BACKOFF_FIRST_S), BACKOFF_MAX_S)
                    log.warning(
                        "request log: writing to %s failed (%s: %s); %d records wait, next "
                        "try in %gs",
                        self.sink.label,
                        type(exc).__name__,
                        exc,
                        self.pending,
                        self._backoff,
                    )
                    await asyncio.sleep(self._backoff)
                    continue
                self._backoff = 0.0
                if len(self._queue) < self._config.batch_max:
                    break  # the rest waits for the next flush: batches stay large

    async def _write_once(self) -> None:
        batch = self._held
        if not batch:
            queue, size = self._queue, self._config.batch_max
            batch = [queue.popleft() for _ in range(min(size, len(queue)))]
            self._held = batch
        self._queued.set(self.pending)
        await self.sink.write([entry for _, entry in batch])
        self._held = []
        now = time.perf_counter()
        self._written.inc(len(batch))
        lag = self._lag
        for ended, _ in batch:
            lag.observe(now - ended)
        self._queued.set(self.pending)

    async def _prune(self) -> None:
        before = time.time() - self._config.retention_days * DAY_S
        try:
            gone = await self.sink.prune(before)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("request log: pruning %s failed: %s", self.sink.label, exc)
            return
        if gone:
            log.info(
                "request log: pruned %d records older than %g days",
                gone,
                self._config.retention_days,
            )


REQUEST_LOG = web.AppKey("request_log", RequestLog)
# Paths whose requests are not logged: the log's own readers and the operator's pages
UNLOGGED_PREFIXES = ("/admin", "/ui")


def entry_of(
    record: RequestRecord,
    *,
    log_id: str,
    client_request_id: str | None,
    method: str,
    status: int,
    duration: float,
    ttft: float | None,
    bodies: str,
    secrets: list[str],
) -> RequestEntry:
    """The record of one ended request (its bodies per `bodies`, `secrets` cut)."""
    overhead = record.overhead_s
    request_body = response_body = None
    if bodies != "off":
        from gateway.observability.request_bodies import body_for_log

        request_body = body_for_log(record.request_body, bodies, secrets)
        answer = record.response_body  # bytes by now (gateway/server/observers.py)
        response_body = body_for_log(answer if isinstance(answer, bytes) else None, bodies, secrets)
    message = record.error_message
    if message is not None and secrets:
        message = redact(message, secrets)
    return RequestEntry(
        id=log_id,
        time=time.time() - duration,
        route=record.route,
        method=method,
        status=record.failed_status or status,
        duration_s=round(duration, 6),
        client_request_id=client_request_id,
        key_name=record.key,
        key_id=record.key_id,
        model=record.model,
        provider=record.provider,
        upstream_model=record.upstream_model,
        stream=record.stream,
        attempts=record.journal or [],
        finish_reason=record.finish_reason,
        input_tokens=record.input_tokens,
        output_tokens=record.output_tokens,
        cached_tokens=record.cached_tokens,
        reasoning_tokens=record.reasoning_tokens,
        cost_usd=record.cost_usd,
        cache=record.cache,
        cache_saved_usd=record.cache_saved_usd,
        ttft_s=None if ttft is None else round(ttft, 6),
        overhead_s=None if overhead is None else round(overhead, 6),
        error=record.error,
        error_message=message,
        request_body=request_body,
        response_body=response_body,
    )


async def request_log_context(app: web.Application) -> AsyncIterator[None]:
    """An app cleanup context (when the log is configured): the writer runs while the app
    serves, and flushes within the shutdown grace when it stops."""
    request_log = app[REQUEST_LOG]
    await request_log.start()
    yield
    await request_log.stop(app[STATE].config.server.shutdown_grace_s)
