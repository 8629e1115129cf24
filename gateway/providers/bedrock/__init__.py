"""The `bedrock` kind: Amazon Bedrock (Converse / ConverseStream, InvokeModel embeddings; SigV4
or an API key)."""

from __future__ import annotations

from gateway.providers.bedrock.adapter import BedrockAdapter
from gateway.providers.bedrock.config import BedrockProvider
from gateway.providers.bedrock.embeddings import BedrockEmbeddings
from gateway.providers.bedrock.prices import price_id
from gateway.providers.spec import ProviderSpec

SPEC = ProviderSpec(
    config=BedrockProvider,
    adapter=BedrockAdapter,
    embeddings=BedrockEmbeddings,
    price_id=price_id,
)
