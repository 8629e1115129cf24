"""The OpenTelemetry SDK's export failures in the gateway's log: each logger that speaks of
them says so at most once a minute, with a count of what it held back."""

from __future__ import annotations

import logging
import threading
import time

# The SDK's loggers that speak of failed exports: each says so at most once a minute.
EXPORT_LOGGERS = (
    "gateway.observability.otlp_exporter",
    "gateway.observability.span_processor",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.sdk._shared_internal",
    "opentelemetry.sdk.trace.export",
)
QUIET_S = 60.0


class _OncePerInterval(logging.Filter):
    """Lets one record of a logger through per `interval` seconds: an unreachable collector
    must not fill the gateway's log with a line per batch."""

    def __init__(self, interval: float) -> None:
        super().__init__()
        self.interval = interval
        self._lock = threading.Lock()
        self._next: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        now = time.monotonic()
        with self._lock:
            if now < self._next.get(record.name, 0.0):
                self._held[record.name] = self._held.get(record.name, 0) + 1
                return False
            self._next[record.name] = now + self.interval
            held = self._held.pop(record.name, 0)
        if held:
            record.msg = f"{record.msg} ({held} more such messages in the last {self.interval:g}s)"
        return True


_quiet = _OncePerInterval(QUIET_S)


def quiet_export_logs() -> None:
    for name in EXPORT_LOGGERS:
        logger = logging.getLogger(name)
        if _quiet not in logger.filters:
            logger.addFilter(_quiet)
