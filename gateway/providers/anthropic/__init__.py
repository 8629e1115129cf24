"""The `anthropic` kind: the Anthropic Messages API (chat, native Messages, count_tokens)."""

from __future__ import annotations

from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.anthropic.config import AnthropicProvider
from gateway.providers.spec import ProviderSpec

SPEC = ProviderSpec(
    config=AnthropicProvider,
    adapter=AnthropicAdapter,
)
