"""Building embeddings calls for the sans-IO tests."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime
from typing import Any

from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.providers.base import BearerToken
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import parse_input

NOW = datetime(2025, 11, 30, 12, 0, 0, tzinfo=UTC)


def make_call(
    provider: ProviderConfig,
    model: str,
    value: Any,
    *,
    key: ProviderKey | None = None,
    dimensions: int | None = None,
    body: dict[str, Any] | None = None,
    access_token: str | None = None,
) -> EmbeddingsCall:
    body = body if body is not None else {"model": "client-name", "input": value}
    return EmbeddingsCall(
        inputs=parse_input(value),
        body=body,
        dimensions=dimensions,
        provider=provider,
        key=key if key is not None else (provider.keys[0] if provider.keys else None),
        model=model,
        now=NOW,
        credential=BearerToken(token=access_token, expires_at=0.0) if access_token else None,
    )
