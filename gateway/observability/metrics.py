"""The gateway's Prometheus metrics, with bounded labels only.

`GatewayMetrics` owns one CollectorRegistry (a fresh one per application, so tests and
several apps in one process never collide) and the metric families. Label values are names
from the config or words of ours (an error kind, a cooldown reason), never a client's
model string or key. Hot-path callers resolve their label children once through the
`*_for` methods, which cache them, and then only call `.inc()`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics import MetricWrapperBase

OTHER_MODEL = "other"  # the `model` label of names that are not configured models


class GatewayMetrics:
    def __init__(
        self, registry: CollectorRegistry | None = None, models: frozenset[str] = frozenset()
    ) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._models = models
        self.upstream_errors = Counter(
            "gateway_upstream_errors",
            "Upstream attempts that failed, by provider and kind of failure",
            ["provider", "kind"],
            registry=self.registry,
        )
        self.retries = Counter(
            "gateway_retries",
            "Attempts moved on to another key of the same target",
            ["provider"],
            registry=self.registry,
        )
        self.failovers = Counter(
            "gateway_failovers",
            "Attempts moved on to another target of the model",
            ["model"],
            registry=self.registry,
        )
        self.key_cooldowns = Counter(
            "gateway_key_cooldowns",
            "Keys taken out of rotation: rate_limited, auth_failed, circuit_open",
            ["provider", "reason"],
            registry=self.registry,
        )
        self._children: dict[tuple[str, ...], Counter] = {}

    def _child(self, family: MetricWrapperBase, *labels: str) -> Counter:
        key = (family._name, *labels)
        cached = self._children.get(key)
        if cached is not None:
            return cached
        child = family.labels(*labels)
        assert isinstance(child, Counter)
        self._children[key] = child
        return child

    def upstream_error_for(self, provider: str, kind: str) -> Counter:
        return self._child(self.upstream_errors, provider, kind)

    def retry_for(self, provider: str) -> Counter:
        return self._child(self.retries, provider)

    def failover_for(self, model: str) -> Counter:
        return self._child(self.failovers, model if model in self._models else OTHER_MODEL)

    def key_cooldown_for(self, provider: str, reason: str) -> Counter:
        return self._child(self.key_cooldowns, provider, reason)
