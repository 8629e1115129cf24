"""The gateway's Prometheus metrics (docs/metrics.md is their reference), bounded labels only.

`GatewayMetrics` owns one Registry (a fresh one per application, so tests and several apps
in one process never collide) and the metric families. Label values are names from the
config or words of ours (a route template, an error kind, a cooldown reason), never a
client's model string or key: `model_label` turns any name that is not configured into
`other`. Hot-path callers resolve their label children once through the `*_for` methods,
which cache them, and then only call `.inc()` / `.observe()`.
"""

from __future__ import annotations

from pathlib import Path

from gateway.config import Config
from gateway.observability.registry import Counter
from gateway.observability.registry import Gauge
from gateway.observability.registry import Histogram
from gateway.observability.registry import Registry

OTHER_MODEL = "other"  # the `model` label of names that are not configured models
NO_PROVIDER = "none"  # the `provider` label of a request no upstream was asked for
OTHER_ROUTE = "other"  # the `route` label of a path no route matches
# seconds; docs/metrics.md lists them for dashboards
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 30, 60, 120)
OVERHEAD_BUCKETS = (
    *(5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4),
    *(1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2),
)
LAG_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
TOKEN_KINDS = ("input", "output", "cached")
# every `reason` of gateway_rejections_total: made at start (at 0), so that a dashboard's
# rate() of a reason that has not happened yet is 0 rather than no data
REJECTION_REASONS = (
    *("auth", "model_not_allowed", "forbidden", "budget_exceeded", "rate_limited"),
    *("bad_request", "not_found", "method_not_allowed", "body_too_large", "shutting_down"),
    *("client_header_timeout", "client_body_timeout", "model_not_priced"),
)

RELOAD_RESULTS = ("ok", "error")  # gateway_config_reloads_total{result}, made at start at 0


def model_names(config: Config) -> frozenset[str]:
    """Every model name a label may carry: the configured models and, for direct addressing,
    `provider/model` of every configured target."""
    names = {m.name for m in config.models}
    names.update(f"{t.provider}/{t.model}" for m in config.models for t in m.targets)
    return frozenset(names)


def status_class(status: int) -> str:
    return f"{min(max(status // 100, 1), 5)}xx"


class RequestSeries:
    """What the end of one request updates, for one (route, model, provider). Each child is
    made on first use, so a combination never seen (a rejected request's time to first
    token) exposes no empty series."""

    __slots__ = (
        "_cost",
        "_duration",
        "_key",
        "_metrics",
        "_overhead",
        "_requests",
        "_tokens",
        "_ttft",
    )

    def __init__(self, metrics: GatewayMetrics, route: str, model: str, provider: str) -> None:
        self._metrics, self._key = metrics, (route, model, provider)
        self._requests: dict[int, Counter] = {}
        self._duration: Histogram | None = None
        self._ttft: Histogram | None = None
        self._overhead: Histogram | None = None
        self._tokens: tuple[Counter, ...] = ()
        self._cost: Counter | None = None

    def count(self, status: int) -> None:
        cls = status // 100
        counter = self._requests.get(cls)
        if counter is None:
            counter = self._metrics.requests.counter(*self._key, status_class(status))
            self._requests[cls] = counter
        counter.inc()

    def observe_duration(self, seconds: float) -> None:
        if self._duration is None:
            self._duration = self._metrics.request_duration.histogram(*self._key)
        self._duration.observe(seconds)

    def observe_ttft(self, seconds: float) -> None:
        if self._ttft is None:
            self._ttft = self._metrics.time_to_first_token.histogram(*self._key)
        self._ttft.observe(seconds)

    def observe_overhead(self, seconds: float) -> None:
        if self._overhead is None:
            route, _, provider = self._key
            self._overhead = self._metrics.overhead.histogram(route, provider)
        self._overhead.observe(seconds)

    def add_usage(self, input_tokens: int, output_tokens: int, cached_tokens: int) -> None:
        if not self._tokens:
            _, model, provider = self._key
            family = self._metrics.tokens
            self._tokens = tuple(family.counter(model, provider, k) for k in TOKEN_KINDS)
        tokens_in, tokens_out, tokens_cached = self._tokens
        tokens_in.inc(input_tokens)
        tokens_out.inc(output_tokens)
        tokens_cached.inc(cached_tokens)

    def add_cost(self, usd: float) -> None:
        if self._cost is None:
            _, model, provider = self._key
            self._cost = self._metrics.cost_usd.counter(model, provider)
        self._cost.inc(usd)


class GatewayMetrics:
    def __init__(
        self,
        registry: Registry | None = None,
        models: frozenset[str] = frozenset(),
        *,
        directory: Path | None = None,
    ) -> None:
        self.registry = registry if registry is not None else Registry(directory)
        self._models = models
        family = self.registry.family
        self.requests = family(
            "gateway_requests_total",
            "counter",
            "API requests answered, by route, model, provider and status class",
            ["route", "model", "provider", "status_class"],
        )
        self.request_duration = family(
            "gateway_request_duration_seconds",
            "histogram",
            "Request received to answer complete",
            ["route", "model", "provider"],
            DURATION_BUCKETS,
        )
        self.time_to_first_token = family(
            "gateway_time_to_first_token_seconds",
            "histogram",
            "Request received to the first output from the upstream (a non-streamed answer: "
            "all of it)",
            ["route", "model", "provider"],
            DURATION_BUCKETS,
        )
        self.overhead = family(
            "gateway_overhead_seconds",
            "histogram",
            "Time spent in gateway code for a request, upstream waits excluded",
            ["route", "provider"],
            OVERHEAD_BUCKETS,
        )
        self.active_streams = family(
            "gateway_active_streams",
            "gauge",
            "Streaming requests being served (summed over live workers)",
            ["route"],
        )
        self.upstream_errors = family(
            "gateway_upstream_errors_total",
            "counter",
            "Upstream attempts that failed, by provider and kind of failure",
            ["provider", "kind"],
        )
        self.retries = family(
            "gateway_retries_total",
            "counter",
            "Attempts moved on to another key of the same target",
            ["provider"],
        )
        self.failovers = family(
            "gateway_failovers_total",
            "counter",
            "Attempts moved on to another target of the model",
            ["model"],
        )
        self.recoveries = family(
            "gateway_recoveries_total",
            "counter",
            "Streams that broke after content with recovery on: recovered, failed, "
            "not_continuable (by the provider whose stream broke first)",
            ["model", "provider", "result"],
        )
        self.key_cooldowns = family(
            "gateway_key_cooldowns_total",
            "counter",
            "Keys taken out of rotation: rate_limited, auth_failed, circuit_open",
            ["provider", "reason"],
        )
        self.tokens = family(
            "gateway_tokens_total",
            "counter",
            "Tokens of settled requests: input (cached included), output, cached",
            ["model", "provider", "kind"],
        )
        self.cost_usd = family(
            "gateway_cost_usd_total",
            "counter",
            "US dollars charged for settled requests",
            ["model", "provider"],
        )
        self.rejections = family(
            "gateway_rejections_total",
            "counter",
            "Requests the gateway refused itself before any upstream, by reason",
            ["reason"],
        )
        self.config_reloads = family(
            "gateway_config_reloads_total",
            "counter",
            "Config reloads tried (SIGHUP or a changed file), by result: ok or error",
            ["result"],
        )
        self.request_log_written = family(
            "gateway_request_log_written_total",
            "counter",
            "Request-log records written to the sink",
            [],
        )
        self.request_log_dropped = family(
            "gateway_request_log_dropped_total",
            "counter",
            "Request-log records dropped: the queue was full, or shutdown came first",
            [],
        )
        self.request_log_errors = family(
            "gateway_request_log_write_errors_total",
            "counter",
            "Batch writes to the request-log sink that failed (each is tried again)",
            [],
        )
        self.request_log_queue = family(
            "gateway_request_log_queue",
            "gauge",
            "Request-log records waiting for the sink (summed over live workers)",
            [],
        )
        self.request_log_lag = family(
            "gateway_request_log_lag_seconds",
            "histogram",
            "From a request's end to its record being written",
            [],
            LAG_BUCKETS,
        )
        self.cache_requests = family(
            "gateway_cache_requests_total",
            "counter",
            "Inference requests the response cache was asked about: hit, miss or bypass",
            ["model", "result"],
        )
        self.cache_saved_usd = family(
            "gateway_cache_saved_usd_total",
            "counter",
            "US dollars cache hits saved (what their answers cost when first served)",
            ["model"],
        )
        self._series: dict[tuple[str, str, str], RequestSeries] = {}
        for reason in REJECTION_REASONS:
            self.rejections.counter(reason)
        for result in RELOAD_RESULTS:
            self.config_reloads.counter(result)
        for made in (self.request_log_written, self.request_log_dropped, self.request_log_errors):
            made.counter()
        self.request_log_queue.gauge()

    def serve_models(self, models: frozenset[str]) -> None:
        """The model names labels may carry from now on (a reloaded config); series of
        models no longer configured keep what they counted."""
        self._models = models

    def config_reload_for(self, result: str) -> Counter:
        return self.config_reloads.counter(result)

    def model_label(self, model: str | None) -> str:
        return model if model is not None and model in self._models else OTHER_MODEL

    def request_series(self, route: str, model: str, provider: str) -> RequestSeries:
        """`model` must already be a label (`model_label`)."""
        key = (route, model, provider)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = RequestSeries(self, route, model, provider)
        return series

    def upstream_error_for(self, provider: str, kind: str) -> Counter:
        return self.upstream_errors.counter(provider, kind)

    def retry_for(self, provider: str) -> Counter:
        return self.retries.counter(provider)

    def failover_for(self, model: str) -> Counter:
        return self.failovers.counter(self.model_label(model))

    def recovery_for(self, model: str, provider: str, result: str) -> Counter:
        return self.recoveries.counter(self.model_label(model), provider, result)

    def key_cooldown_for(self, provider: str, reason: str) -> Counter:
        return self.key_cooldowns.counter(provider, reason)

    def active_streams_for(self, route: str) -> Gauge:
        return self.active_streams.gauge(route)

    def rejection_for(self, reason: str) -> Counter:
        return self.rejections.counter(reason)

    def cache_request_for(self, model: str, result: str) -> Counter:
        return self.cache_requests.counter(self.model_label(model), result)

    def cache_saved_for(self, model: str) -> Counter:
        return self.cache_saved_usd.counter(self.model_label(model))

    def exposition(self) -> bytes:
        return self.registry.exposition()

    def close(self) -> None:
        self.registry.close()


__all__ = ["Counter", "GatewayMetrics", "Gauge", "Histogram", "RequestSeries"]
