"""What happens when a key changes state: a log line, a metric, and a note to the other
processes through the shared store (when one is attached).

401/403 is loud: one ERROR line when the key leaves rotation (not again while it stays out),
one INFO line when it is accepted again. The key is named by its configured name or its
fingerprint, never by its secret.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from typing import Protocol

from gateway.observability.metrics import GatewayMetrics
from gateway.routing.health import AUTH_FAILED
from gateway.routing.health import CIRCUIT_OPEN
from gateway.routing.health import RECOVERED
from gateway.routing.health import KeyHealth

if TYPE_CHECKING:
    from gateway.observability.metrics import Counter

log = logging.getLogger("gateway.routing")


class Publisher(Protocol):
    def publish(self, health: KeyHealth, reason: str, until: float, model: str | None) -> None:
        """Tell the other processes (`until` is monotonic; 0 with RECOVERED: the hold ended)."""
        ...


class Prober(Protocol):
    def __call__(self, health: KeyHealth, reason: str, until: float) -> None:
        """Told of every change to unavailable (gateway/server/circuit_probe.py)."""
        ...


class HealthEvents:
    """The `on_change` of every KeyHealth of one router."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self._metrics = metrics
        self._counters: dict[tuple[str, str], Counter] = {}
        self.publisher: Publisher | None = None
        self.prober: Prober | None = None

    def __call__(
        self, health: KeyHealth, reason: str, until: float, model: str | None, first: bool
    ) -> None:
        if reason == RECOVERED:
            if first:  # it was out of rotation for its credentials: say it is back
                log.info("provider %r key %s: accepted again", health.provider, health.label)
        else:
            counter = self._counters.get((health.provider, reason))
            if counter is None:
                counter = self._metrics.key_cooldown_for(health.provider, reason)
                self._counters[(health.provider, reason)] = counter
            counter.inc()
            self._log(health, reason, until, model, first)
            if self.prober is not None:
                self.prober(health, reason, until)
        if self.publisher is not None:
            self.publisher.publish(health, reason, until, model)

    def _log(
        self, health: KeyHealth, reason: str, until: float, model: str | None, first: bool
    ) -> None:
        if reason == AUTH_FAILED and first:
            log.error(
                "provider %r key %s: the upstream rejected the credentials (401/403); "
                "out of rotation, one probe after the hold (routing.auth_hold_s)",
                health.provider,
                health.label,
            )
        elif reason == CIRCUIT_OPEN:
            log.warning(
                "provider %r key %s: circuit open after %d consecutive failures (open #%d)",
                health.provider,
                health.label,
                health.failures,
                health.opens,
            )
        elif log.isEnabledFor(logging.DEBUG):
            log.debug(
                "provider %r key %s: %s (model %s)", health.provider, health.label, reason, model
            )
