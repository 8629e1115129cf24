"""The `ollama` provider's config: a self-hosted server, keys optional (none is sent)."""

from __future__ import annotations

from typing import ClassVar

from gateway.config_base import ProviderBase


class OllamaProvider(
    ProviderBase, tag="ollama", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "ollama"
    default_url: ClassVar[str | None] = "http://localhost:11434"
    keyless: ClassVar[bool] = True
