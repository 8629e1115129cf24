"""The `openai` kind: OpenAI and any OpenAI-compatible server (Chat Completions, Responses,
embeddings)."""

from __future__ import annotations

from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.config import OpenAIProvider
from gateway.providers.openai.embeddings import OpenAIEmbeddings
from gateway.providers.spec import ProviderSpec

SPEC = ProviderSpec(
    config=OpenAIProvider,
    adapter=OpenAIAdapter,
    embeddings=OpenAIEmbeddings,
)
