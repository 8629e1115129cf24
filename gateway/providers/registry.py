"""Provider kind -> adapter. The one place that knows which kinds exist in this build."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from gateway.config import ProviderConfig
from gateway.errors import BadRequest, InternalError
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.azure.adapter import AzureAdapter
from gateway.providers.base import ProviderAdapter
from gateway.providers.bedrock.adapter import BedrockAdapter
from gateway.providers.bedrock.embeddings import BedrockEmbeddings
from gateway.providers.embeddings import EmbeddingsProvider
from gateway.providers.gemini.adapter import GeminiAdapter
from gateway.providers.gemini.embeddings import GeminiEmbeddings, VertexAIEmbeddings
from gateway.providers.mock.adapter import MockAdapter
from gateway.providers.mock.embeddings import MockEmbeddings
from gateway.providers.ollama.adapter import OllamaAdapter
from gateway.providers.ollama.embeddings import OllamaEmbeddings
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.embeddings import AzureEmbeddings, OpenAIEmbeddings
from gateway.providers.vertex.adapter import VertexAdapter

AdapterFactory = Callable[[ProviderConfig], ProviderAdapter]

ADAPTERS: MappingProxyType[str, AdapterFactory] = MappingProxyType(
    {
        "openai": OpenAIAdapter,
        "azure": AzureAdapter,
        "anthropic": AnthropicAdapter,
        "gemini": GeminiAdapter,
        "vertex": VertexAdapter,
        "bedrock": BedrockAdapter,
        "ollama": OllamaAdapter,
        "mock": MockAdapter,
    }
)


def make_adapter(provider: ProviderConfig) -> ProviderAdapter:
    factory = ADAPTERS.get(provider.kind)
    if factory is None:
        raise InternalError(
            f"provider {provider.name!r}: kind {provider.kind!r} is not supported by this build"
        )
    return factory(provider)


def supported_kinds() -> frozenset[str]:
    return frozenset(ADAPTERS)


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
