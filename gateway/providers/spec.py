"""What a provider kind declares once, in its package's `SPEC`: its config class (which holds
its default base URL, credential forms, required and kind-only fields, and the upstream APIs a
target may pick), its chat adapter (framing, the client APIs it forwards natively, counting
tokens, rate-limit headers), its embeddings family if it has one, and how its model ids map
to prices. The registry (registry.py) lists the specs; nothing outside gateway/providers/
names a kind. Sans-IO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.config_base import ProviderBase
from gateway.providers.base import cannot_count_tokens


def same_id(model: str) -> str:
    return model


@dataclass(frozen=True, slots=True)
class ProviderSpec:
    """One provider kind."""

    config: type[ProviderBase]
    adapter: Callable[[Any], Any]  # ProviderConfig of this kind -> ProviderAdapter
    embeddings: Callable[[Any], Any] | None = None  # -> EmbeddingsProvider; None: no API
    # Prices: a self-hosted kind's tokens cost nothing; `price_id` turns an upstream model
    # id into the price table's name for it (after the generic lower-casing and prefix cut)
    self_hosted: bool = False
    price_id: Callable[[str], str] = same_id

    @property
    def kind(self) -> str:
        return self.config.kind

    @property
    def capabilities(self) -> frozenset[str]:
        """What the kind can serve: chat always; embeddings, count_tokens, continuation
        (Responses `previous_response_id` handled by the upstream) where declared."""
        found = {"chat"}
        if self.embeddings is not None:
            found.add("embeddings")
        if getattr(self.adapter, "count_tokens", cannot_count_tokens) is not cannot_count_tokens:
            found.add("count_tokens")
        if "responses" in self.config.apis:
            found.add("continuation")
        return frozenset(found)
