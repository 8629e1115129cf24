"""The batch span processor of the gateway's traces (docs/tracing.md, "Export"): an SDK
`SpanProcessor` that queues finished spans and exports them in batches from the event loop,
with no thread of its own (gateway/observability/otlp_exporter.py says why).

It keeps the SDK's BatchSpanProcessor's behaviour and settings: a queue of
`OTEL_BSP_MAX_QUEUE_SIZE` (2048) spans, past which spans are dropped and counted; an export
as soon as `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` (512) are queued, else every
`OTEL_BSP_SCHEDULE_DELAY` ms (5000); one export at a time; what is queued exported at
shutdown, within the grace period.

`on_end` is called on the event loop (RequestTrace runs in the request's task).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Mapping
from collections.abc import Sequence
from typing import Any

from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace import Span
from opentelemetry.sdk.trace import SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter

from gateway.observability.otlp_exporter import OTLPHttpExporter
from gateway.observability.otlp_wire import export_request
from gateway.observability.otlp_wire import export_wire

log = logging.getLogger(__name__)

DEFAULTS = {
    "OTEL_BSP_MAX_QUEUE_SIZE": 2048,
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": 512,
    "OTEL_BSP_SCHEDULE_DELAY": 5000,  # ms
}


def bsp_setting(env: Mapping[str, str], name: str) -> int:
    """One OTEL_BSP_* setting; a value that is not a positive integer is its default."""
    default = DEFAULTS[name]
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        log.warning("tracing: %s=%r is not a positive integer; %d is used", name, raw, default)
        return default
    return value


class LoopBatchSpanProcessor(SpanProcessor):
    """Finished spans, queued and exported in batches by tasks of the loop that ends them.

    `exporter`: the gateway's OTLP/HTTP exporter (it posts otlp_wire's body of a batch), or
    any SDK SpanExporter (a test's), called with the spans themselves. The gateway's own
    spans come to the first as their encoded bytes only (`add_wire`): a queued object per
    span would be work and garbage for nothing; `resource` and `scope` are theirs."""

    def __init__(
        self,
        exporter: OTLPHttpExporter | SpanExporter,
        *,
        resource: Any = None,
        scope: Any = None,
        max_queue: int = DEFAULTS["OTEL_BSP_MAX_QUEUE_SIZE"],
        batch: int = DEFAULTS["OTEL_BSP_MAX_EXPORT_BATCH_SIZE"],
        delay_s: float = DEFAULTS["OTEL_BSP_SCHEDULE_DELAY"] / 1000.0,
    ) -> None:
        self.exporter = exporter
        self.resource = resource
        self.scope = scope
        self.max_queue = max_queue
        self.batch = min(batch, max_queue)
        self.delay_s = delay_s
        self.dropped = 0
        self.exported = 0
        self._queue: deque[ReadableSpan | bytes] = deque()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._export: asyncio.Task[None] | None = None
        self._closed = False

    @classmethod
    def from_env(
        cls,
        exporter: OTLPHttpExporter | SpanExporter,
        env: Mapping[str, str],
        resource: Any = None,
        scope: Any = None,
    ) -> LoopBatchSpanProcessor:
        return cls(
            exporter,
            resource=resource,
            scope=scope,
            max_queue=bsp_setting(env, "OTEL_BSP_MAX_QUEUE_SIZE"),
            batch=bsp_setting(env, "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"),
            delay_s=bsp_setting(env, "OTEL_BSP_SCHEDULE_DELAY") / 1000.0,
        )

    @property
    def queued(self) -> int:
        return len(self._queue)

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        pass

    def on_end(self, span: ReadableSpan) -> None:
        self.add_wire(span)

    def add_wire(self, span: ReadableSpan | bytes) -> None:
        """A finished span, or (for the OTLP exporter) its span_field bytes."""
        queue = self._queue
        if self._closed or len(queue) >= self.max_queue:
            self.dropped += 1
            if self.dropped % 1000 == 1:  # a line per thousand: a dead collector, not a flood
                log.warning("tracing: span queue full or closed, %d spans dropped", self.dropped)
            return
        queue.append(span)
        if self._loop is None:
            self._bind()
        if len(queue) >= self.batch and self._export is None:
            self._start(everything=False)

    def _bind(self) -> asyncio.AbstractEventLoop | None:
        """The loop spans end on (the first one seen); its timer exports what waits."""
        if self._loop is None and not self._closed:
            try:
                self._loop = asyncio.get_running_loop()
            except RuntimeError:  # no loop yet (a span ended in plain code): the next flush
                return None
            self._timer = self._loop.call_later(self.delay_s, self._tick)
        return self._loop

    def _tick(self) -> None:
        loop = self._loop
        if self._closed or loop is None:
            return
        self._timer = loop.call_later(self.delay_s, self._tick)
        if self._queue and self._export is None:
            self._start(everything=False, at_least_one=True)

    def _start(self, *, everything: bool, at_least_one: bool = False) -> asyncio.Task[None] | None:
        loop = self._bind()
        if loop is None:
            return None
        self._export = loop.create_task(self._export_queued(everything, at_least_one))
        return self._export

    async def _export_queued(self, everything: bool, at_least_one: bool) -> None:
        """Batches from the queue's head: all of it, or while a whole batch waits (at least
        one batch, however small, when the schedule's timer fired)."""
        queue = self._queue
        try:
            while queue and (everything or at_least_one or len(queue) >= self.batch):
                at_least_one = False
                batch = [queue.popleft() for _ in range(min(self.batch, len(queue)))]
                await self._send(batch)
        finally:
            self._export = None

    async def _send(self, batch: Sequence[ReadableSpan | bytes]) -> None:
        exporter = self.exporter
        try:
            if isinstance(exporter, OTLPHttpExporter):
                await exporter.export(self._body(batch))
            else:
                exporter.export([s for s in batch if not isinstance(s, bytes)])
        except asyncio.CancelledError:
            raise
        except Exception:  # a span otlp_wire cannot write, a test exporter's failure
            log.warning("tracing: a span batch could not be exported", exc_info=True)
            return
        self.exported += len(batch)

    def _body(self, batch: Sequence[ReadableSpan | bytes]) -> bytes:
        wires = [s for s in batch if isinstance(s, bytes)]
        body = export_wire(self.resource, self.scope, wires) if wires else b""
        if len(wires) < len(batch):  # SDK spans too: a request of their own, appended
            body += export_request([s for s in batch if not isinstance(s, bytes)])
        return body

    async def flush(self) -> None:
        """Exports everything queued now (after an export already running)."""
        while True:
            running = self._export
            if running is not None:
                await asyncio.shield(running)
                continue
            if not self._queue:
                return
            task = self._start(everything=True)
            if task is None:
                return
            await asyncio.shield(task)

    async def close(self, timeout_s: float) -> bool:
        """Exports what is queued within `timeout_s`, then stops; True if all of it went."""
        try:
            await asyncio.wait_for(self.flush(), timeout_s)
            done = True
        except TimeoutError:
            done = False
        self.shutdown()
        running, self._export = self._export, None
        if running is not None:
            running.cancel()
        if isinstance(self.exporter, OTLPHttpExporter):
            await self.exporter.close()
        else:
            self.exporter.shutdown()
        return done and not self._queue

    def shutdown(self) -> None:
        """No more spans are taken (the provider's shutdown; `close` exports first)."""
        self._closed = True
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """The SDK's synchronous flush cannot wait on the loop it would block: `flush` does
        that. True when nothing waits to be exported."""
        return not self._queue and self._export is None

    def __repr__(self) -> str:
        state: dict[str, Any] = {"queued": len(self._queue), "dropped": self.dropped}
        return f"LoopBatchSpanProcessor({state})"
