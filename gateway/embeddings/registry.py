"""Provider kind -> embeddings provider family. A kind without an embeddings API (anthropic)
is absent, and asking for it is the client's 400."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from gateway.config import ProviderConfig
from gateway.embeddings.base import EmbeddingsProvider
from gateway.embeddings.bedrock import BedrockEmbeddings
from gateway.embeddings.gemini import GeminiEmbeddings, VertexAIEmbeddings
from gateway.embeddings.mock import MockEmbeddings
from gateway.embeddings.ollama import OllamaEmbeddings
from gateway.embeddings.openai import AzureEmbeddings, OpenAIEmbeddings
from gateway.errors import BadRequest

EmbeddingsFactory = Callable[[ProviderConfig], EmbeddingsProvider]

EMBEDDINGS: MappingProxyType[str, EmbeddingsFactory] = MappingProxyType(
    {
        "openai": OpenAIEmbeddings,
        "azure": AzureEmbeddings,
        "gemini": GeminiEmbeddings,
        "vertex": VertexAIEmbeddings,
        "bedrock": BedrockEmbeddings,
        "ollama": OllamaEmbeddings,
        "mock": MockEmbeddings,
    }
)


def embeddings_provider(provider: ProviderConfig) -> EmbeddingsProvider:
    """The embeddings family of `provider`; 400 for a kind that has no embeddings API."""
    factory = EMBEDDINGS.get(provider.kind)
    if factory is None:
        raise BadRequest(
            f"provider {provider.name!r} is of kind {provider.kind!r}, which has no "
            "embeddings API; use a model served by an openai, azure, gemini, vertex, "
            "bedrock, ollama or mock provider",
            param="model",
            code="embeddings_not_supported",
        )
    return factory(provider)
