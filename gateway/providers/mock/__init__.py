"""The `mock` kind: an in-process provider that plays back a canned stream (the default config,
tests, benchmarks)."""

from __future__ import annotations

from gateway.providers.mock.adapter import MockAdapter
from gateway.providers.mock.config import MockProvider
from gateway.providers.mock.embeddings import MockEmbeddings
from gateway.providers.spec import ProviderSpec

SPEC = ProviderSpec(
    config=MockProvider,
    adapter=MockAdapter,
    embeddings=MockEmbeddings,
    self_hosted=True,
)
