"""The `vertex` kind: Gemini models on Google Cloud Vertex AI (an OAuth token per request)."""

from __future__ import annotations

from gateway.providers.spec import ProviderSpec
from gateway.providers.vertex.adapter import VertexAdapter
from gateway.providers.vertex.config import VertexProvider
from gateway.providers.vertex.embeddings import VertexAIEmbeddings

SPEC = ProviderSpec(
    config=VertexProvider,
    adapter=VertexAdapter,
    embeddings=VertexAIEmbeddings,
)
