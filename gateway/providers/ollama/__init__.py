"""The `ollama` kind: an Ollama server (/api/chat NDJSON, /api/embed)."""

from __future__ import annotations

from gateway.providers.ollama.adapter import OllamaAdapter
from gateway.providers.ollama.config import OllamaProvider
from gateway.providers.ollama.embeddings import OllamaEmbeddings
from gateway.providers.spec import ProviderSpec

SPEC = ProviderSpec(
    config=OllamaProvider,
    adapter=OllamaAdapter,
    embeddings=OllamaEmbeddings,
    self_hosted=True,
)
