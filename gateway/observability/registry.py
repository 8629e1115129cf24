"""A small metrics registry whose values live in a `Segment` (shared memory), and the
Prometheus text exposition of what every process of the gateway counted.

Why not prometheus_client: its multiprocess mode takes a lock and packs a struct into an
mmap on every update, and a histogram observation walks its buckets in Python;
`bench/micro/test_metrics.py` measures both side by side (docs/microbenchmarks.md). Here an
update is `segment.doubles[i] += x` and a histogram finds its bucket with `bisect`.

Families are declared once; a child (one label combination) is allocated in the segment the
first time it is asked for and cached, so the hot path holds children and only updates them.
Label values must come from bounded sets: that is the caller's job (GatewayMetrics).
"""

from __future__ import annotations

import math
import os
from bisect import bisect_left
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import msgspec

from gateway.observability.segments import Segment
from gateway.observability.segments import Values
from gateway.observability.segments import merge_into
from gateway.observability.segments import parse
from gateway.observability.segments import read_dir
from gateway.observability.segments import segment_path

Kind = Literal["counter", "gauge", "histogram"]
_key_encoder = msgspec.json.Encoder()
_key_decoder = msgspec.json.Decoder(list[str])


class Counter:
    __slots__ = ("_at", "_segment")

    def __init__(self, segment: Segment, at: int) -> None:
        self._segment, self._at = segment, at

    def inc(self, amount: float = 1.0) -> None:
        self._segment.doubles[self._at] += amount

    def value(self) -> float:
        return self._segment.doubles[self._at]


class Gauge(Counter):
    __slots__ = ()

    def dec(self, amount: float = 1.0) -> None:
        self._segment.doubles[self._at] -= amount

    def set(self, value: float) -> None:
        self._segment.doubles[self._at] = value


class Histogram:
    """Slots: one per bucket (not cumulative; the last is +Inf), then the sum."""

    __slots__ = ("_at", "_bounds", "_segment", "_sum_at")

    def __init__(self, segment: Segment, at: int, bounds: tuple[float, ...]) -> None:
        self._segment, self._at, self._bounds = segment, at, bounds
        self._sum_at = at + len(bounds) + 1

    def observe(self, value: float) -> None:
        doubles = self._segment.doubles
        doubles[self._at + bisect_left(self._bounds, value)] += 1.0
        doubles[self._sum_at] += value


class Family:
    """One metric: its name as exposed, type, help, label names and (histograms) buckets."""

    def __init__(
        self,
        registry: Registry,
        name: str,
        kind: Kind,
        help: str,
        labels: Sequence[str],
        buckets: Sequence[float] = (),
    ) -> None:
        self.registry = registry
        self.name, self.kind, self.help = name, kind, help
        self.labels = tuple(labels)
        self.buckets = tuple(sorted(buckets))
        self.slots = len(self.buckets) + 2 if kind == "histogram" else 1
        self._children: dict[tuple[str, ...], Counter | Gauge | Histogram] = {}

    def _child(self, values: tuple[str, ...]) -> Counter | Gauge | Histogram:
        child = self._children.get(values)
        if child is not None:
            return child
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} takes labels {self.labels}, got {values}")
        segment = self.registry.segment
        at = segment.allocate(_key_encoder.encode([self.name, *values]), self.slots)
        if self.kind == "histogram":
            child = Histogram(segment, at, self.buckets)
        elif self.kind == "gauge":
            child = Gauge(segment, at)
        else:
            child = Counter(segment, at)
        self._children[values] = child
        return child

    def counter(self, *values: str) -> Counter:
        child = self._child(values)
        assert type(child) is Counter
        return child

    def gauge(self, *values: str) -> Gauge:
        child = self._child(values)
        assert isinstance(child, Gauge)
        return child

    def histogram(self, *values: str) -> Histogram:
        child = self._child(values)
        assert isinstance(child, Histogram)
        return child


class Registry:
    """The families of one application and the segment their values live in. `directory`:
    the worker segments' directory of a multi-process gateway (collect reads them all)."""

    def __init__(self, directory: Path | None = None) -> None:
        self.directory = directory
        path = segment_path(directory, os.getpid()) if directory is not None else None
        self.segment = Segment(path)
        self.families: dict[str, Family] = {}

    def family(
        self, name: str, kind: Kind, help: str, labels: Sequence[str], buckets: Sequence[float] = ()
    ) -> Family:
        family = Family(self, name, kind, help, labels, buckets)
        self.families[name] = family
        return family

    def collect(self) -> Values:
        """Every process's values merged: counters and histograms summed over all of them,
        gauges over the live ones (docs/metrics.md)."""
        total: Values = {}
        if self.directory is None:
            merge_into(total, parse(self.segment.snapshot()))
            return total
        live, dead = read_dir(self.directory)
        for data in live:
            merge_into(total, parse(data))
        gauges = {name for name, f in self.families.items() if f.kind == "gauge"}
        for data in dead:
            merge_into(total, ((k, v) for k, v in parse(data) if _name_of(k) not in gauges))
        return total

    def exposition(self) -> bytes:
        """The Prometheus text format (0.0.4) of `collect()`."""
        by_family: dict[str, list[tuple[list[str], list[float]]]] = {}
        for key, values in self.collect().items():
            name, *labels = _key_decoder.decode(key)
            by_family.setdefault(name, []).append((labels, values))
        lines: list[str] = []
        for name, family in self.families.items():
            lines.append(f"# HELP {name} {_escape_help(family.help)}")
            lines.append(f"# TYPE {name} {family.kind}")
            for labels, values in sorted(by_family.get(name, ())):
                if len(labels) != len(family.labels) or len(values) != family.slots:
                    continue  # written by a different build of the gateway: not ours to read
                pairs = [f'{n}="{_escape(v)}"' for n, v in zip(family.labels, labels, strict=True)]
                if family.kind != "histogram":
                    lines.append(f"{name}{_braces(pairs)} {_number(values[0])}")
                    continue
                cumulative = 0.0
                for bound, count in zip((*family.buckets, math.inf), values[:-1], strict=True):
                    cumulative += count
                    le = f'le="{_number(bound)}"'
                    lines.append(f"{name}_bucket{_braces([*pairs, le])} {_number(cumulative)}")
                lines.append(f"{name}_sum{_braces(pairs)} {_number(values[-1])}")
                lines.append(f"{name}_count{_braces(pairs)} {_number(cumulative)}")
        lines.append("")
        return "\n".join(lines).encode()

    def get_sample_value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """One exposed sample's value (`name` as in the exposition: `x_total`, `x_bucket`
        with `le`, `x_sum`, `x_count`), or None when it has not been counted."""
        wanted = dict(labels or {})
        for family in self.families.values():
            suffix = name[len(family.name) :] if name.startswith(family.name) else None
            if suffix is None or (suffix and family.kind != "histogram"):
                continue
            le = wanted.pop("le", None) if suffix == "_bucket" else None
            if set(wanted) != set(family.labels):
                return None
            key = _key_encoder.encode([family.name, *(wanted[n] for n in family.labels)])
            values = self.collect().get(key)
            if values is None:
                return None
            if not suffix:
                return values[0]
            if suffix == "_sum":
                return values[-1]
            if suffix == "_count":
                return sum(values[:-1])
            if suffix == "_bucket" and le is not None:
                limit, bounds = float(le), (*family.buckets, math.inf)
                return sum(c for b, c in zip(bounds, values[:-1], strict=True) if b <= limit)
        return None

    def close(self) -> None:
        self.segment.close()


def _name_of(key: bytes) -> str:
    return _key_decoder.decode(key)[0]


def _braces(pairs: list[str]) -> str:
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if value == math.inf:
        return "+Inf"
    if value == -math.inf:
        return "-Inf"
    if math.isnan(value):
        return "NaN"
    if value == int(value) and abs(value) < 1e15:
        return f"{int(value)}.0"
    return repr(value)
