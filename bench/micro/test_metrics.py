"""Microbenchmarks of what observability adds to the hot path (docs/microbenchmarks.md).

- `test_request_metrics[ours]`: the metric updates at the end of one non-streaming request,
  exactly as the access middleware makes them (`count_request`: requests_total, the three
  histograms, three token counters, cost), into the shared-memory registry a worker of
  `--workers N` uses (its values in a file in a directory).
- `test_request_metrics[prometheus_client*]`: the same eight updates through
  prometheus_client, single-process and in its multiprocess mode (PROMETHEUS_MULTIPROC_DIR),
  children resolved beforehand (its best case). This is the comparison that chose the
  registry (gateway/observability/registry.py).
- `test_access_line`: building the access log's JSON line; `test_access_log_write`: handing
  it to the `gateway.access` logger, set up as `configure_logging` sets it up (the
  redacting formatter, a stream handler: one `write` per line), writing to /dev/null.
- `test_per_read`: what the actor adds per upstream read (`StreamActor.processed` and the
  `perf_counter()` before it).

Every benchmark checks what it counted, so a broken path fails instead of looking fast.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import prometheus_client
import pytest
from prometheus_client import values as prometheus_values

from gateway.config import parse_config
from gateway.observability.access import RequestRecord
from gateway.observability.access import access_line
from gateway.observability.access import count_request
from gateway.observability.logs import ACCESS_LOGGER
from gateway.observability.logs import configure_logging
from gateway.observability.metrics import DURATION_BUCKETS
from gateway.observability.metrics import OVERHEAD_BUCKETS
from gateway.observability.metrics import GatewayMetrics
from gateway.stream.actor import StreamActor

ROUTE = "/v1/chat/completions"
PerEvent = Callable[[int], None]
UPDATES = 8  # one counter, three histograms, three token counters, one cost counter


def ended_request() -> RequestRecord:
    record = RequestRecord(time.perf_counter() - 0.05, ROUTE)
    record.model, record.provider, record.upstream_model = "smart", "openai", "gpt-4.1"
    record.attempts, record.key = 1, "ci-bot"
    record.input_tokens, record.output_tokens, record.cached_tokens = 120, 80, 0
    record.cost_usd = 0.00088
    record.first_token_at = record.received + 0.04
    record.overhead_s = 0.00021
    return record


@pytest.fixture
def shared_metrics(tmp_path: Path) -> Iterator[GatewayMetrics]:
    metrics = GatewayMetrics(models=frozenset({"smart"}), directory=tmp_path)
    yield metrics
    metrics.close()


@pytest.mark.benchmark(group="metrics")
def test_request_metrics_ours(
    benchmark: Any, per_event: PerEvent, shared_metrics: GatewayMetrics
) -> None:
    record = ended_request()
    per_event(1)  # one request per round
    count_request(shared_metrics, record, 200)  # children made once, as in a running worker
    benchmark(count_request, shared_metrics, record, 200)
    # pytest-benchmark calibrates with extra calls: check that the counts agree, not a number
    registry = shared_metrics.registry
    labels = {"route": ROUTE, "model": "smart", "provider": "openai"}
    requests = registry.get_sample_value(
        "gateway_requests_total", {**labels, "status_class": "2xx"}
    )
    assert requests is not None
    assert requests >= 2
    assert registry.get_sample_value("gateway_request_duration_seconds_count", labels) == requests
    assert (
        registry.get_sample_value(
            "gateway_overhead_seconds_count", {"route": ROUTE, "provider": "openai"}
        )
        == requests
    )
    output = {"model": "smart", "provider": "openai", "kind": "output"}
    assert registry.get_sample_value("gateway_tokens_total", output) == 80 * requests


def prometheus_updates() -> Callable[[], None]:
    """The same eight updates through prometheus_client, children resolved once."""
    registry = prometheus_client.CollectorRegistry()
    labels3 = ("route", "model", "provider")
    requests = prometheus_client.Counter(
        "r", "", [*labels3, "status_class"], registry=registry
    ).labels(ROUTE, "smart", "openai", "2xx")
    duration, ttft = (
        prometheus_client.Histogram(
            n, "", labels3, buckets=DURATION_BUCKETS, registry=registry
        ).labels(ROUTE, "smart", "openai")
        for n in ("d", "t")
    )
    overhead = prometheus_client.Histogram(
        "o", "", ["route", "provider"], buckets=OVERHEAD_BUCKETS, registry=registry
    ).labels(ROUTE, "openai")
    tokens = prometheus_client.Counter("k", "", ["model", "provider", "kind"], registry=registry)
    tokens_in, tokens_out, tokens_cached = (
        tokens.labels("smart", "openai", k) for k in ("input", "output", "cached")
    )
    cost = prometheus_client.Counter("c", "", ["model", "provider"], registry=registry).labels(
        "smart", "openai"
    )

    def update() -> None:
        requests.inc()
        duration.observe(0.05)
        ttft.observe(0.04)
        overhead.observe(0.00021)
        tokens_in.inc(120)
        tokens_out.inc(80)
        tokens_cached.inc(0)
        cost.inc(0.00088)

    return update


@pytest.mark.benchmark(group="metrics")
@pytest.mark.parametrize("mode", ["single-process", "multiprocess"])
def test_request_metrics_prometheus_client(
    benchmark: Any,
    per_event: PerEvent,
    mode: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if mode == "multiprocess":
        # what setting PROMETHEUS_MULTIPROC_DIR before importing prometheus_client does
        monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
        monkeypatch.setattr(prometheus_values, "ValueClass", prometheus_values.MultiProcessValue())
    update = prometheus_updates()
    per_event(1)
    benchmark(update)
    if mode == "multiprocess":
        assert any(tmp_path.glob("counter_*.db"))
        assert any(tmp_path.glob("histogram_*.db"))


@pytest.mark.benchmark(group="metrics")
def test_access_line(benchmark: Any, per_event: PerEvent) -> None:
    record = ended_request()
    per_event(1)
    line = benchmark(access_line, record, 200, "0123456789ab0000000001", "POST", 0.05, 0.04)
    assert line.startswith('{"ts":"')
    assert '"key":"ci-bot"' in line
    assert '"output_tokens":80' in line


def per_read(actor: Any, reads: int) -> None:
    perf_counter, processed = time.perf_counter, StreamActor.processed
    for _ in range(reads):
        mark = perf_counter()  # the actor takes it when a read returns
        processed(actor, mark, True)


@pytest.mark.benchmark(group="metrics")
def test_per_read(benchmark: Any, per_event: PerEvent) -> None:
    reads = 200
    actor = SimpleNamespace(gateway_s=0.0, first_token_at=0.0)
    per_event(reads)
    benchmark(per_read, actor, reads)
    assert actor.first_token_at > 0
    assert actor.gateway_s > 0


@pytest.mark.benchmark(group="metrics")
def test_access_log_write(benchmark: Any, per_event: PerEvent, tmp_path: Path) -> None:
    config = parse_config(
        'auth: {master_key: "sk-master-bench"}\nkeys: [{name: a, key: "sk-virtual-bench"}]\n',
        env={},
    )
    logger = logging.getLogger(ACCESS_LOGGER)
    saved = (logger.handlers[:], logger.level, logger.propagate)
    configure_logging(config)
    handler = logger.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    with open(os.devnull, "w") as sink:
        handler.setStream(sink)
        line = access_line(ended_request(), 200, "0123456789ab0000000001", "POST", 0.05, 0.04)
        per_event(1)
        try:
            benchmark(logger.info, line)
            assert handler.formatter is not None
            record = logging.LogRecord(ACCESS_LOGGER, logging.INFO, "", 0, line, None, None)
            assert handler.formatter.format(record) == line
        finally:
            logger.handlers[:], logger.level, logger.propagate = saved
            logging.getLogger().handlers.clear()
