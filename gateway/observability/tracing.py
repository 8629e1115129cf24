"""OpenTelemetry traces (docs/tracing.md): the process's `Tracing` (a TracerProvider whose
batch processor exports over OTLP/HTTP from the event loop, the sampling bound, what repeats
in every span made once), which starts each request's `RequestTrace`
(gateway/observability/request_trace.py).

This module is imported only when `tracing` is configured (gateway/app.py): with tracing off
neither the SDK nor any of this runs on the request path.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from gateway.config_base import ProviderBase
from gateway.config_base import effective_base_url
from gateway.config_observe import TracingConfig
from gateway.config_observe import otlp_endpoint
from gateway.observability.export_logs import quiet_export_logs
from gateway.observability.otlp_exporter import OTLPHttpExporter
from gateway.observability.otlp_wire import attribute_fields
from gateway.observability.request_trace import RequestTrace
from gateway.observability.span_processor import LoopBatchSpanProcessor

log = logging.getLogger(__name__)

EXPORT_TIMEOUT_S = 5.0  # one export's bound (its retries included): a hung collector waits no more


def _server_of(url: str) -> tuple[str, str | None, int | None]:
    """url.full without userinfo, query or fragment (where a key may ride), its host and port."""
    parts = urlsplit(url)
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    netloc = host or ""
    if ":" in netloc:  # an IPv6 literal
        netloc = f"[{netloc}]"
    if parts.port:
        netloc = f"{netloc}:{parts.port}"
    return f"{parts.scheme}://{netloc}{parts.path}", host, port


class Tracing:
    """The process's tracer: its provider (what flushes and shuts down the processor), the
    batch processor the requests' spans go to, the exporter behind it, and the sampling
    bound of TraceIdRatioBased for requests that start their trace."""

    __slots__ = (
        "_fixed",
        "_servers",
        "bound",
        "content",
        "ids",
        "processor",
        "provider",
        "resource",
        "scope",
        "wire_only",
    )

    def __init__(
        self,
        provider: TracerProvider,
        processor: LoopBatchSpanProcessor,
        sample_ratio: float,
        content: bool,
    ) -> None:
        self.provider = provider
        self.processor = processor
        self.resource = provider.resource
        self.scope = processor.scope or InstrumentationScope("gateway")
        self.ids = RandomIdGenerator()
        self.bound = TraceIdRatioBased.get_bound_for_rate(sample_ratio)
        self.content = content
        # our exporter reads a span's encoding only: the spans can be WireSpans, not
        # whole ReadableSpans (any other exporter, a test's, gets those)
        self.wire_only = isinstance(processor.exporter, OTLPHttpExporter)
        self._servers: dict[str, dict[str, Any]] = {}  # by base URL: few, parsed once
        self._fixed: dict[tuple[str | None, ...], tuple[dict[str, Any], bytes]] = {}

    def fixed(
        self, key: tuple[str | None, ...], values: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], bytes] | None:
        """A span's attributes that are the same for every span of its kind, model and
        provider, with their encoding, made once (`values` given: remembered under `key`)."""
        if values is None:
            return self._fixed.get(key)
        if len(self._fixed) >= 4096:  # models x providers x routes: far fewer
            self._fixed.clear()
        known = self._fixed[key] = (values, attribute_fields(values))
        return known

    def server_of(self, provider: ProviderBase) -> dict[str, Any]:
        """An attempt span's url.full, server.address and server.port for `provider`."""
        try:
            base = effective_base_url(provider)
        except ValueError:
            return {}
        attributes = self._servers.get(base)
        if attributes is None:
            url, host, port = _server_of(base)
            attributes = {"url.full": url, "server.address": host, "server.port": port}
            attributes = {k: v for k, v in attributes.items() if v is not None}
            if len(self._servers) < 1024:  # a reloaded config's providers are added, never many
                self._servers[base] = attributes
        return attributes

    @classmethod
    def from_config(
        cls,
        config: TracingConfig,
        env: Mapping[str, str],
        exporter: OTLPHttpExporter | SpanExporter | None = None,
    ) -> Tracing:
        """`exporter`: where the spans go instead of OTLP (tests)."""
        if exporter is None:
            endpoint = otlp_endpoint(config, env)
            if endpoint is None:  # a checked config has one
                raise ValueError("tracing needs otlp_endpoint")
            exporter = OTLPHttpExporter(
                endpoint.rstrip("/") + "/v1/traces", env, timeout_s=EXPORT_TIMEOUT_S
            )
        quiet_export_logs()
        provider = TracerProvider(
            resource=Resource.create({"service.name": config.service_name}),
            # the decision RequestTrace takes itself, for anything else that would start a span
            sampler=ParentBased(TraceIdRatioBased(config.sample_ratio)),
            shutdown_on_exit=False,  # shutdown() below, bounded; never an unbounded atexit
        )
        scope = InstrumentationScope("gateway")
        processor = LoopBatchSpanProcessor.from_env(exporter, env, provider.resource, scope)
        provider.add_span_processor(processor)
        return cls(provider, processor, config.sample_ratio, config.content)

    def start_request(self, headers: Mapping[str, str], route: str, method: str) -> RequestTrace:
        return RequestTrace(self, headers, route, method)

    async def flush(self, timeout_s: float) -> bool:
        """Exports what is queued now; False: not within `timeout_s`."""
        try:
            await asyncio.wait_for(self.processor.flush(), timeout_s)
        except TimeoutError:
            return False
        return True

    async def shutdown(self, timeout_s: float) -> bool:
        """Exports what is queued and stops, within `timeout_s` (an export to a hung
        collector is then cancelled). False: it did not finish in time."""
        try:
            done = await self.processor.close(timeout_s)
        except Exception:  # an exporter's failure is no shutdown's
            log.warning("tracing: the span exporter failed while shutting down", exc_info=True)
            done = False
        self.provider.shutdown()  # the processor is closed already: nothing waits
        if not done:
            log.warning("tracing: spans still unexported after %.1fs, given up", timeout_s)
        return done
