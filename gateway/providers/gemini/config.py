"""The `gemini` provider's config: a Gemini API key (`x-goog-api-key`)."""

from __future__ import annotations

from typing import ClassVar

from gateway.config_base import ProviderBase
from gateway.config_base import effective_base_url


class GeminiProvider(
    ProviderBase, tag="gemini", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "gemini"
    default_url: ClassVar[str | None] = "https://generativelanguage.googleapis.com"
    env_key: ClassVar[str | None] = "GEMINI_API_KEY"

    def models_url(self) -> str:
        """The prefix of every model's operations (`{models_url}{model}:generateContent`)."""
        return effective_base_url(self) + "/v1beta/models/"
