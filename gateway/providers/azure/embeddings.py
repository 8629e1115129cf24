"""Embeddings on Azure OpenAI: the OpenAI embeddings wire format (openai/embeddings.py) at
the resource's `embeddings` URL (azure/urls.py), the key in `api-key` or an identity key's
Entra ID token as a bearer. Sans-IO."""

from __future__ import annotations

from gateway.config_base import ProviderKey
from gateway.providers.azure.config import AzureProvider
from gateway.providers.azure.urls import AzureUrls
from gateway.providers.azure.urls import auth_headers
from gateway.providers.azure.urls import azure_source
from gateway.providers.base import TokenSource
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.openai.embeddings import OpenAIEmbeddings


class AzureEmbeddings(OpenAIEmbeddings):
    """The `azure` kind."""

    def __init__(self, provider: AzureProvider) -> None:
        self._provider = provider
        self._urls = AzureUrls(provider)

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return azure_source(self._provider, key)

    def url(self, call: EmbeddingsCall) -> str:
        return self._urls.of("embeddings", call.model)

    def headers(self, call: EmbeddingsCall) -> dict[str, str]:
        return auth_headers(call.key, call.credential)
