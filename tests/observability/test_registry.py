"""The shared-memory registry: values, growth, merging over worker files, dead workers, and
an exposition that an independent parser (prometheus_client's) reads back exactly."""

from __future__ import annotations

import math
import multiprocessing
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.metrics import DURATION_BUCKETS
from gateway.observability.metrics import REJECTION_REASONS
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.metrics import status_class
from gateway.observability.registry import Registry
from gateway.observability.segments import Segment
from gateway.observability.segments import parse
from gateway.observability.segments import read_dir
from gateway.observability.segments import retire
from gateway.observability.segments import segment_path


def samples(exposition: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(exposition.decode()):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_segment_keeps_values_across_growth() -> None:
    segment = Segment(size=64)  # room for almost nothing: every series grows it
    first = segment.allocate(b"first", 2)
    segment.doubles[first] += 3.0
    others = [segment.allocate(f"series-{i}".encode(), 3) for i in range(500)]
    segment.doubles[first + 1] += 0.5
    segment.doubles[others[-1] + 2] += 7.0
    parsed = dict(parse(segment.snapshot()))
    assert parsed[b"first"] == [3.0, 0.5]
    assert parsed[b"series-499"] == [0.0, 0.0, 7.0]
    assert len(parsed) == 501
    segment.close()


def test_histogram_buckets_are_cumulative_and_le_is_inclusive() -> None:
    metrics = GatewayMetrics(models=frozenset({"smart"}))
    series = metrics.request_series("/v1/chat/completions", "smart", "up")
    for seconds in (0.005, 0.006, 1.0, 500.0):
        series.observe_duration(seconds)
    got = samples(metrics.exposition())
    labels = (("model", "smart"), ("provider", "up"), ("route", "/v1/chat/completions"))
    name = "gateway_request_duration_seconds"

    def bucket(le: str) -> float:
        return got[(f"{name}_bucket", tuple(sorted((*labels, ("le", le)))))]

    assert bucket("0.005") == 1  # an observation equal to a bound falls in that bucket
    assert bucket("0.01") == 2
    assert bucket("1.0") == 3
    assert bucket("120.0") == 3
    assert bucket("+Inf") == 4
    assert got[(f"{name}_count", labels)] == 4
    assert got[(f"{name}_sum", labels)] == pytest.approx(501.011)
    assert len([k for k in got if k[0] == f"{name}_bucket"]) == len(DURATION_BUCKETS) + 1


def test_label_values_are_escaped() -> None:
    registry = Registry()
    family = registry.family("t_total", "counter", "help with \\ and\nnewline", ["name"])
    family.counter('a "quoted"\\ \nname').inc(2)
    got = samples(registry.exposition())
    assert got[("t_total", (("name", 'a "quoted"\\ \nname'),))] == 2


def test_unconfigured_models_share_one_label() -> None:
    metrics = GatewayMetrics(models=frozenset({"smart", "up/text"}))
    assert metrics.model_label("smart") == "smart"
    assert metrics.model_label("up/text") == "up/text"
    assert metrics.model_label("up/anything-else") == "other"
    assert metrics.model_label("sk-looks-like-a-key") == "other"
    assert metrics.model_label(None) == "other"
    assert [status_class(s) for s in (200, 404, 499, 502)] == ["2xx", "4xx", "4xx", "5xx"]


def _worker(directory: Path, count: int, streams: int) -> None:
    metrics = GatewayMetrics(models=frozenset({"smart"}), directory=directory)
    series = metrics.request_series("/v1/chat/completions", "smart", "up")
    for i in range(count):
        series.count(200)
        series.observe_duration(0.001 * i)
    metrics.active_streams_for("/v1/chat/completions").inc(streams)
    metrics.rejection_for("auth").inc()


def test_workers_merge_counters_histograms_and_live_gauges(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(tmp_path, n, n)) for n in (3, 5, 7)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(20)
        assert proc.exitcode == 0
    # the first worker died: its counts stay, its gauge goes
    pid = procs[0].pid
    assert pid is not None
    retire(tmp_path, pid)
    live, dead = read_dir(tmp_path)
    assert (len(live), len(dead)) == (2, 1)

    reader = GatewayMetrics(models=frozenset({"smart"}), directory=tmp_path)  # a 4th worker
    got = samples(reader.exposition())
    labels = (("model", "smart"), ("provider", "up"), ("route", "/v1/chat/completions"))
    assert got[("gateway_requests_total", (*labels, ("status_class", "2xx")))] == 15
    assert got[("gateway_request_duration_seconds_count", labels)] == 15
    expected_sum = sum(0.001 * i for n in (3, 5, 7) for i in range(n))
    assert got[("gateway_request_duration_seconds_sum", labels)] == pytest.approx(expected_sum)
    assert got[("gateway_rejections_total", (("reason", "auth"),))] == 3
    assert got[("gateway_active_streams", (("route", "/v1/chat/completions"),))] == 12
    assert segment_path(tmp_path, pid).exists()
    reader.close()


def test_get_sample_value_reads_the_exposed_names() -> None:
    metrics = GatewayMetrics(models=frozenset({"smart"}))
    metrics.upstream_error_for("up", "http_5xx").inc()
    metrics.request_series("/v1/responses", "smart", "up").observe_overhead(0.00002)
    registry = metrics.registry
    assert (
        registry.get_sample_value(
            "gateway_upstream_errors_total", {"provider": "up", "kind": "http_5xx"}
        )
        == 1
    )
    labels = {"route": "/v1/responses", "provider": "up"}
    assert registry.get_sample_value("gateway_overhead_seconds_count", labels) == 1
    assert (
        registry.get_sample_value("gateway_overhead_seconds_bucket", {**labels, "le": "1e-05"}) == 0
    )
    assert (
        registry.get_sample_value("gateway_overhead_seconds_bucket", {**labels, "le": "2.5e-05"})
        == 1
    )
    assert registry.get_sample_value("gateway_retries_total", {"provider": "up"}) is None
    assert not math.isnan(registry.get_sample_value("gateway_overhead_seconds_sum", labels) or 0)


def test_every_rejection_reason_is_declared_and_starts_at_zero() -> None:
    from gateway.observability import access

    used = {*access._REJECTION_BY_STATUS.values(), *access._REJECTION_BY_CODE.values()}
    assert used <= set(REJECTION_REASONS)
    got = samples(GatewayMetrics().exposition())
    for reason in REJECTION_REASONS:
        assert got[("gateway_rejections_total", (("reason", reason),))] == 0
