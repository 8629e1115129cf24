"""Fixed log-spaced histograms of microseconds that processes can merge by adding counts.

Every histogram has the same buckets (BUCKETS_PER_DECADE per decade from 1 µs to 100 s, one
underflow bucket for values under 1 µs, one overflow bucket past 100 s), so a process sends
its counts as a plain list and the orchestrator adds them element-wise. A percentile is the
upper edge of the bucket it falls in (at most ~2.3% above the true value with 100 buckets per
decade); the exact maximum is kept beside the counts.
"""

from __future__ import annotations

import math
from typing import Any

BUCKETS_PER_DECADE = 100
DECADES = 8  # 1 µs .. 100 s
NBUCKETS = BUCKETS_PER_DECADE * DECADES + 2  # + underflow (index 0) + overflow (last)
_LOG_SCALE = BUCKETS_PER_DECADE / math.log(10.0)
_log = math.log
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def bucket_of(us: float) -> int:
    """The bucket index of a value in microseconds."""
    if us < 1.0:
        return 0
    index = int(math.log(us) * _LOG_SCALE) + 1
    return index if index < NBUCKETS - 1 else NBUCKETS - 1


def upper_edge(index: int) -> float:
    """The largest value (µs) bucket `index` holds; the overflow bucket reports infinity."""
    if index == 0:
        return 1.0
    if index >= NBUCKETS - 1:
        return math.inf
    return 10.0 ** (index / BUCKETS_PER_DECADE)


class Histogram:
    """Counts of microsecond values in the fixed buckets, plus count, sum and exact max."""

    __slots__ = ("count", "counts", "max_us", "total_us")

    def __init__(self) -> None:
        self.counts = [0] * NBUCKETS
        self.count = 0
        self.total_us = 0.0
        self.max_us = 0.0

    def record(self, us: float) -> None:
        # bucket_of inlined: this runs for every chunk, in the client and the upstream
        if us < 1.0:
            us = max(us, 0.0)  # one clock everywhere: only rounding can make a delay negative
            index = 0
        else:
            index = min(int(_log(us) * _LOG_SCALE) + 1, NBUCKETS - 1)
        self.counts[index] += 1
        self.count += 1
        self.total_us += us
        if us > self.max_us:
            self.max_us = us

    def record_ns(self, ns: int) -> None:
        self.record(ns / 1000.0)

    def merge(self, other: Histogram) -> None:
        counts = self.counts
        for index, n in enumerate(other.counts):
            if n:
                counts[index] += n
        self.count += other.count
        self.total_us += other.total_us
        self.max_us = max(self.max_us, other.max_us)

    def percentile(self, pct: float) -> float | None:
        """The value (µs) under which `pct` percent of the values fall; None when empty."""
        if self.count == 0:
            return None
        rank = max(1, math.ceil(self.count * pct / 100.0))
        seen = 0
        for index, n in enumerate(self.counts):
            seen += n
            if seen >= rank:
                return min(upper_edge(index), self.max_us)
        return self.max_us

    def mean(self) -> float | None:
        return self.total_us / self.count if self.count else None

    def summary_ms(self) -> dict[str, float | int | None]:
        """count, p50, p90, p99, p99.9, max and mean in milliseconds."""
        out: dict[str, float | int | None] = {"count": self.count}
        for pct in PERCENTILES:
            value = self.percentile(pct)
            out[f"p{pct:g}"] = None if value is None else value / 1000.0
        out["max"] = self.max_us / 1000.0 if self.count else None
        mean = self.mean()
        out["mean"] = None if mean is None else mean / 1000.0
        return out

    def to_dict(self) -> dict[str, Any]:
        # sparse: most of the 402 buckets are empty
        sparse = {str(i): n for i, n in enumerate(self.counts) if n}
        return {
            "counts": sparse,
            "count": self.count,
            "total_us": self.total_us,
            "max_us": self.max_us,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Histogram:
        hist = cls()
        for index, n in data["counts"].items():
            hist.counts[int(index)] = int(n)
        hist.count = int(data["count"])
        hist.total_us = float(data["total_us"])
        hist.max_us = float(data["max_us"])
        return hist


def merged(hists: list[Histogram]) -> Histogram:
    out = Histogram()
    for hist in hists:
        out.merge(hist)
    return out
