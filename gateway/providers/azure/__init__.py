"""The `azure` kind: Azure OpenAI / AI Foundry (the OpenAI wire format at Azure's URLs, `api-
key` auth)."""

from __future__ import annotations

from gateway.providers.azure.adapter import AzureAdapter
from gateway.providers.azure.config import AzureProvider
from gateway.providers.azure.embeddings import AzureEmbeddings
from gateway.providers.spec import ProviderSpec

SPEC = ProviderSpec(
    config=AzureProvider,
    adapter=AzureAdapter,
    embeddings=AzureEmbeddings,
)
