"""The `gemini` kind: the Gemini API (generateContent, batchEmbedContents)."""

from __future__ import annotations

from gateway.providers.gemini.adapter import GeminiAdapter
from gateway.providers.gemini.config import GeminiProvider
from gateway.providers.gemini.embeddings import GeminiEmbeddings
from gateway.providers.spec import ProviderSpec

SPEC = ProviderSpec(
    config=GeminiProvider,
    adapter=GeminiAdapter,
    embeddings=GeminiEmbeddings,
)
