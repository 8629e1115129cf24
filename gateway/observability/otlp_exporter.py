"""OTLP/HTTP export of span batches from the event loop (docs/tracing.md, "Export").

The SDK's OTLPSpanExporter posts with `requests` on the batch processor's thread. That thread
shares the event loop's GIL: each time it woke it took the GIL from the loop for its Python
work, and under load that cost the gateway ~55 µs a request, ten times the CPU the export
itself needs (`make bench-observe`, docs/performance.md). So a batch's body (otlp_wire's
bytes, joined) is posted here with aiohttp, on the loop, as any other upstream call is.

It keeps what the SDK's exporter honours: the `OTEL_EXPORTER_OTLP_[TRACES_]*` settings for
headers, compression, a private CA and a client certificate; HTTP(S)_PROXY/NO_PROXY (as
`requests` reads them); retries of 429, 502, 503, 504 and connection failures with
jittered exponential backoff (or the collector's Retry-After), all within one bound per export.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import random
import ssl
import time
import zlib
from collections.abc import Mapping

import aiohttp
from opentelemetry.util.re import parse_env_headers

log = logging.getLogger(__name__)

RETRYABLE = frozenset({429, 502, 503, 504})
COMPRESSIONS = ("none", "gzip", "deflate")
FIRST_BACKOFF_S = 1.0
JITTER = 0.2
_COMPRESS_IN_THREAD = 64 * 1024  # zlib releases the GIL: a large body is compressed off the loop


def _setting(env: Mapping[str, str], name: str) -> str | None:
    """A signal-specific OTEL_EXPORTER_OTLP_TRACES_<name>, else the general one."""
    value = env.get(f"OTEL_EXPORTER_OTLP_TRACES_{name}") or env.get(f"OTEL_EXPORTER_OTLP_{name}")
    return value.strip() if value and value.strip() else None


def _retry_after(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        return None  # an HTTP date: rare from collectors; the backoff applies


class OTLPHttpExporter:
    """Posts ExportTraceServiceRequest bodies to one collector URL (…/v1/traces)."""

    def __init__(self, endpoint: str, env: Mapping[str, str], timeout_s: float) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        compression = (_setting(env, "COMPRESSION") or "none").lower()
        if compression not in COMPRESSIONS:
            raise ValueError(
                f"OTEL_EXPORTER_OTLP_COMPRESSION: {compression!r} is not one of {COMPRESSIONS}"
            )
        self.compression = compression
        headers = {
            "Content-Type": "application/x-protobuf",
            "User-Agent": "gateway-otlp-exporter",
        }
        raw_headers = _setting(env, "HEADERS")
        if raw_headers:
            headers.update(parse_env_headers(raw_headers, liberal=True))
        if compression != "none":
            headers["Content-Encoding"] = compression
        self.headers = headers
        self._ssl = self._tls(env)
        self._session: aiohttp.ClientSession | None = None
        self.failures = 0

    @staticmethod
    def _tls(env: Mapping[str, str]) -> ssl.SSLContext | None:
        ca = _setting(env, "CERTIFICATE")
        cert, key = _setting(env, "CLIENT_CERTIFICATE"), _setting(env, "CLIENT_KEY")
        if ca is None and cert is None:
            return None
        context = ssl.create_default_context(cafile=ca)
        if cert is not None:
            context.load_cert_chain(cert, key)
        return context

    async def _body(self, body: bytes) -> bytes:
        if self.compression == "none":
            return body
        if len(body) < _COMPRESS_IN_THREAD:
            return self._compress(body)
        return await asyncio.get_running_loop().run_in_executor(None, self._compress, body)

    def _compress(self, body: bytes) -> bytes:
        if self.compression == "gzip":
            return gzip.compress(body)
        return zlib.compress(body)

    def _client(self) -> aiohttp.ClientSession:
        session = self._session
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=4, ssl=self._ssl if self._ssl else True)
            # trust_env: a proxy in HTTP(S)_PROXY is used as the SDK's `requests` used it
            session = self._session = aiohttp.ClientSession(
                connector=connector, trust_env=True, auto_decompress=True
            )
        return session

    async def export(self, body: bytes) -> bool:
        """Posts one batch; True once the collector took it. Never raises: a collector that
        fails, hangs or is gone is logged (at most once a minute) and the batch given up,
        within `timeout_s` in all."""
        deadline = time.monotonic() + self.timeout_s
        try:
            data = await self._body(body)
            retry = 0
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"no answer within {self.timeout_s:g}s")
                status, wait = await self._post(data, remaining)
                if status is not None and 200 <= status < 400:
                    return True
                if status is not None and status not in RETRYABLE:
                    raise RuntimeError(f"the collector answered {status}")
                if wait is None:
                    wait = FIRST_BACKOFF_S * 2**retry * random.uniform(1 - JITTER, 1 + JITTER)
                if wait >= deadline - time.monotonic():
                    answer = status or "nothing"
                    raise RuntimeError(f"the collector answered {answer}; no time left to retry")
                retry += 1
                await asyncio.sleep(wait)
        except asyncio.CancelledError:
            self.failures += 1
            raise
        except Exception as error:
            self.failures += 1
            log.warning("Failed to export span batch to %s: %s", self.endpoint, error)
            return False

    async def _post(self, data: bytes, timeout_s: float) -> tuple[int | None, float | None]:
        """The collector's status (None: no connection) and its Retry-After."""
        try:
            async with self._client().post(
                self.endpoint,
                data=data,
                headers=self.headers,
                timeout=aiohttp.ClientTimeout(total=timeout_s),
            ) as response:
                await response.read()
                return response.status, _retry_after(response.headers.get("Retry-After"))
        except (aiohttp.ClientConnectionError, ConnectionError) as error:
            if isinstance(error, aiohttp.ClientConnectorCertificateError):
                raise
            return None, None

    async def close(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()
