"""The `openai` provider's config: an api key, `base_url` for any OpenAI-compatible server."""

from __future__ import annotations

from typing import ClassVar
from typing import Literal

from gateway.config_base import ProviderBase


class OpenAIProvider(
    ProviderBase, tag="openai", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "openai"
    default_url: ClassVar[str | None] = "https://api.openai.com/v1"
    apis: ClassVar[frozenset[str]] = frozenset({"chat", "responses"})
    env_key: ClassVar[str | None] = "OPENAI_API_KEY"

    # How this server continues an answer from a trailing assistant turn, for streams that
    # broke elsewhere (models[].recovery): vLLM/SGLang `continue_final_message`,
    # DeepSeek/Mistral `prefix`; none (OpenAI's own API): it cannot
    continuation: Literal["none", "continue_final_message", "prefix"] = "none"
