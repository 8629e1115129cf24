"""The SDK's OTLP/HTTP span exporter (its transport, retries, compression, headers and
`OTEL_EXPORTER_OTLP_*` settings) with the request body written by otlp_wire instead of the
SDK's encoder: the same message, in a fraction of the CPU (docs/tracing.md, "Cost")."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

from gateway.observability.otlp_wire import export_request

log = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")


class WireOTLPSpanExporter(OTLPSpanExporter):
    """OTLPSpanExporter.export, with otlp_wire's encoding. It reads the exporter's
    `_client`, `_metrics` and `_max_request_size`: the SDK is pinned in requirements.lock,
    and tests/observability/test_tracing.py exports through it to a receiver that decodes
    the protobuf, so an SDK that renames them fails the suite, not production."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            log.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        with self._metrics.export_operation(len(spans)) as result:
            try:
                body = export_request(spans)
            except Exception as error:  # a span the encoder cannot write: this batch only
                log.error("Failed to encode span batch: %s", error)
                result.error = error
                return SpanExportResult.FAILURE
            if 0 < self._max_request_size < len(body):
                log.warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size "
                    "%d bytes.",
                    len(body),
                    self._max_request_size,
                )
                return SpanExportResult.FAILURE
            exported = self._client.export(body)
            if not exported.success:
                result.error = exported.error
                if exported.status_code is not None:
                    result.error_attrs = {"http.response.status_code": exported.status_code}
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS
