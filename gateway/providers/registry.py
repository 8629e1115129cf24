"""Provider kind -> adapter. The one place that knows which kinds exist in this build."""

from __future__ import annotations

from collections.abc import Callable
from types import MappingProxyType

from gateway.config import ProviderConfig
from gateway.errors import InternalError
from gateway.providers.anthropic import AnthropicAdapter
from gateway.providers.azure import AzureAdapter
from gateway.providers.base import ProviderAdapter
from gateway.providers.bedrock import BedrockAdapter
from gateway.providers.gemini import GeminiAdapter
from gateway.providers.mock import MockAdapter
from gateway.providers.ollama import OllamaAdapter
from gateway.providers.openai import OpenAIAdapter
from gateway.providers.vertex import VertexAdapter

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
