"""The `anthropic` provider's config: an api key (`x-api-key`)."""

from __future__ import annotations

from typing import ClassVar

from gateway.config_base import ProviderBase


class AnthropicProvider(
    ProviderBase, tag="anthropic", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "anthropic"
    default_url: ClassVar[str | None] = "https://api.anthropic.com"
    env_key: ClassVar[str | None] = "ANTHROPIC_API_KEY"
