"""The config sections of what the gateway keeps about its requests after they end: the
request log (`request_log`) and traces (`tracing`), and their rules (docs/configuration.md).

Both sections are optional: absent, nothing of them runs. They change only with a restart
(gateway/server/reload.py): the log's writer and the tracer are set up with the process.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

import msgspec

from gateway.config_parse import Problem

OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
STORE_SINK = "store"  # the configured store's own database (sqlite; memory: in process)
_SINK_FORMS = "store, sqlite:///PATH or postgresql://USER:PASSWORD@HOST:PORT/DB"


class RequestLogConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One record per request, written in batches off the request path (docs/request-log.md)."""

    sink: str = STORE_SINK  # store | sqlite:///PATH | postgresql://... (postgres://...)
    retention_days: float = 30.0  # older records are pruned
    bodies: Literal["off", "redacted", "full"] = "off"  # request and answer bodies kept
    queue_max: int = 100_000  # records waiting for the sink; beyond it they are dropped
    batch_max: int = 1000  # records per write
    flush_s: float = 0.5  # the longest a record waits before its batch is written

    def __repr__(self) -> str:
        # a postgresql URL may carry a password: never show the userinfo
        return f"RequestLogConfig(sink={sink_label(self.sink)!r}, bodies={self.bodies!r})"


class TracingConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """OpenTelemetry traces over OTLP/HTTP (docs/tracing.md)."""

    # a base URL to which /v1/traces is added, as OTEL_EXPORTER_OTLP_ENDPOINT (its fallback)
    otlp_endpoint: str | None = None
    sample_ratio: float = 1.0  # of the traces this gateway starts; a client's sampled flag wins
    service_name: str = "gateway"
    content: bool = False  # prompt and completion text as span events


def sink_label(sink: str) -> str:
    """A sink as logs and errors may show it: a URL without its userinfo."""
    scheme, sep, rest = sink.partition("://")
    netloc, slash, tail = rest.partition("/")
    if sep and "@" in netloc:
        return scheme + sep + "***@" + netloc.rpartition("@")[2] + slash + tail
    return sink


def is_postgres_sink(sink: str) -> bool:
    return sink.startswith(("postgresql://", "postgres://"))


def otlp_endpoint(tracing: TracingConfig, env: Mapping[str, str]) -> str | None:
    return tracing.otlp_endpoint or env.get(OTLP_ENDPOINT_ENV) or None


def observe_problems(
    request_log: RequestLogConfig | None,
    tracing: TracingConfig | None,
    store_url: str,
    env: Mapping[str, str],
) -> Iterator[Problem]:
    if request_log is not None:
        yield from _request_log_problems(request_log, store_url)
    if tracing is not None:
        yield from _tracing_problems(tracing, env)


def _request_log_problems(log: RequestLogConfig, store_url: str) -> Iterator[Problem]:
    here = ("request_log",)
    sink = log.sink
    if sink == STORE_SINK:
        if store_url.startswith(("redis", "rediss")):
            yield (
                (*here, "sink"),
                "the redis store keeps no request log: set sink to postgresql://... "
                "(one log for every replica) or sqlite:///PATH (this replica's own file)",
            )
    elif sink.startswith("sqlite:///"):
        if len(sink) == len("sqlite:///"):
            yield (*here, "sink"), "sqlite:/// needs a file path"
    elif is_postgres_sink(sink):
        try:
            parts = urlsplit(sink)
            _ = parts.port
        except ValueError:
            yield (*here, "sink"), "not a valid postgresql:// URL"
        else:
            if not parts.hostname and "host=" not in parts.query:
                yield (*here, "sink"), "a postgresql:// URL needs a host"
    else:
        yield (*here, "sink"), f"expected {_SINK_FORMS}"
    if not (math.isfinite(log.retention_days) and log.retention_days > 0):
        yield (*here, "retention_days"), "must be a positive number of days"
    if log.queue_max < 1:
        yield (*here, "queue_max"), "must be at least 1"
    if log.batch_max < 1:
        yield (*here, "batch_max"), "must be at least 1"
    if not (math.isfinite(log.flush_s) and 0 < log.flush_s <= 60):
        yield (*here, "flush_s"), "must be above 0 and at most 60"


def _tracing_problems(tracing: TracingConfig, env: Mapping[str, str]) -> Iterator[Problem]:
    here = ("tracing",)
    endpoint = otlp_endpoint(tracing, env)
    if endpoint is None:
        yield (
            (*here, "otlp_endpoint"),
            f"tracing needs otlp_endpoint (or {OTLP_ENDPOINT_ENV} in the environment)",
        )
    else:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            yield (*here, "otlp_endpoint"), "must be an http:// or https:// URL"
    ratio = tracing.sample_ratio
    if not (math.isfinite(ratio) and 0.0 <= ratio <= 1.0):
        yield (*here, "sample_ratio"), "must be between 0 and 1"
    if not tracing.service_name.strip():
        yield (*here, "service_name"), "must not be empty"
