"""The overview's history: the gateway's own counters sampled every `overview_interval_s`,
an hour of points kept in this process (docs/console.md, "GET /ui/api/overview").

`summarise` reads one merged snapshot of the metrics (`Registry.collect`: every worker's
values, as /metrics shows them) down to what the overview draws; `point` turns two
snapshots into the rates and quantiles of the interval between them. Both are pure: the
sampling task is `OverviewSampler.run`. Only inference routes (`/v1/...`) count: the
console's own calls and the probes are not traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Sequence

import msgspec

from gateway.observability.registry import Registry
from gateway.observability.segments import Values

log = logging.getLogger("gateway.console")
WINDOW_S = 3600.0
INFERENCE_PREFIX = "/v1/"
_key_decoder = msgspec.json.Decoder(list[str])


class Snapshot(msgspec.Struct, kw_only=True):
    """Cumulative totals at one moment."""

    at: float  # unix seconds
    requests: float = 0.0
    errors: float = 0.0  # answered 4xx or 5xx
    server_errors: float = 0.0  # answered 5xx
    duration: list[float] = []  # per-bucket counts (the last: above every bound)
    ttft: list[float] = []
    cost_usd: float = 0.0
    active_streams: float = 0.0


class Point(msgspec.Struct, kw_only=True):
    """The interval before `t`."""

    t: float
    rps: float
    error_ratio: float | None
    server_error_ratio: float | None
    p50_s: float | None
    p95_s: float | None
    ttft_p50_s: float | None
    ttft_p95_s: float | None
    cost_per_hour_usd: float
    active_streams: int


def summarise(values: Values, bounds: Sequence[float], at: float) -> Snapshot:
    """The overview's totals in a merged snapshot (`bounds`: the duration histograms')."""
    snap = Snapshot(at=at, duration=[0.0] * (len(bounds) + 1), ttft=[0.0] * (len(bounds) + 1))
    for key, counts in values.items():
        name, *labels = _key_decoder.decode(key)
        if name == "gateway_requests_total" and len(labels) == 4:
            if labels[0].startswith(INFERENCE_PREFIX):
                snap.requests += counts[0]
                if labels[3] in ("4xx", "5xx"):
                    snap.errors += counts[0]
                if labels[3] == "5xx":
                    snap.server_errors += counts[0]
        elif name == "gateway_request_duration_seconds" and len(labels) == 3:
            if labels[0].startswith(INFERENCE_PREFIX) and len(counts) == len(bounds) + 2:
                _add(snap.duration, counts)
        elif name == "gateway_time_to_first_token_seconds" and len(labels) == 3:
            if labels[0].startswith(INFERENCE_PREFIX) and len(counts) == len(bounds) + 2:
                _add(snap.ttft, counts)
        elif name == "gateway_cost_usd_total" and counts:
            snap.cost_usd += counts[0]
        elif name == "gateway_active_streams" and counts:
            snap.active_streams += counts[0]
    return snap


def _add(into: list[float], counts: list[float]) -> None:
    for i in range(len(into)):
        into[i] += counts[i]  # the last value of `counts` is the sum: not a bucket


def quantile(q: float, buckets: Sequence[float], bounds: Sequence[float]) -> float | None:
    """As Prometheus' histogram_quantile: linear within the bucket the rank falls in; the
    highest finite bound when it falls above every bound; None without observations."""
    total = sum(buckets)
    if total <= 0:
        return None
    rank, seen = q * total, 0.0
    for i, count in enumerate(buckets):
        if count > 0 and seen + count >= rank:
            if i >= len(bounds):
                return float(bounds[-1])
            low = 0.0 if i == 0 else bounds[i - 1]
            return low + (bounds[i] - low) * (rank - seen) / count
        seen += count
    return float(bounds[-1])


def point(before: Snapshot, now: Snapshot, bounds: Sequence[float]) -> Point:
    span = max(now.at - before.at, 1e-9)
    requests = max(now.requests - before.requests, 0.0)
    duration = [max(a - b, 0.0) for a, b in zip(now.duration, before.duration, strict=True)]
    ttft = [max(a - b, 0.0) for a, b in zip(now.ttft, before.ttft, strict=True)]

    def ratio(a: float, b: float) -> float | None:
        return None if requests <= 0 else round(max(a - b, 0.0) / requests, 6)

    def rounded(value: float | None) -> float | None:
        return None if value is None else round(value, 6)

    return Point(
        t=round(now.at, 3),
        rps=round(requests / span, 4),
        error_ratio=ratio(now.errors, before.errors),
        server_error_ratio=ratio(now.server_errors, before.server_errors),
        p50_s=rounded(quantile(0.5, duration, bounds)),
        p95_s=rounded(quantile(0.95, duration, bounds)),
        ttft_p50_s=rounded(quantile(0.5, ttft, bounds)),
        ttft_p95_s=rounded(quantile(0.95, ttft, bounds)),
        cost_per_hour_usd=round(max(now.cost_usd - before.cost_usd, 0.0) / span * 3600, 6),
        active_streams=max(round(now.active_streams), 0),
    )


class OverviewSampler:
    """Samples `registry` every `interval_s` and keeps an hour of points."""

    def __init__(self, registry: Registry, bounds: Sequence[float], interval_s: float) -> None:
        self.registry = registry
        self.bounds = tuple(bounds)
        self.interval_s = interval_s
        self.points: deque[Point] = deque(maxlen=max(int(WINDOW_S / interval_s), 1))
        self.last: Snapshot | None = None
        self._task: asyncio.Task[None] | None = None

    async def sample(self) -> None:
        if self.registry.directory is None:
            values = self.registry.collect()
        else:  # other workers' files: read off the event loop, as /metrics does
            values = await asyncio.to_thread(self.registry.collect)
        snap = summarise(values, self.bounds, time.time())
        if self.last is not None:
            self.points.append(point(self.last, snap, self.bounds))
        self.last = snap

    async def run(self) -> None:
        while True:
            try:
                await self.sample()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a torn read of a worker's file: the next one is whole
                log.debug("console overview: sampling failed: %s", exc)
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name="console-overview")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def report(self) -> dict[str, object]:
        last = self.last
        return {
            "interval_s": self.interval_s,
            "window_s": WINDOW_S,
            "points": [msgspec.structs.asdict(p) for p in self.points],
            "totals": {
                "requests": int(last.requests) if last else 0,
                "errors": int(last.errors) if last else 0,
                "cost_usd": round(last.cost_usd, 6) if last else 0.0,
            },
        }
