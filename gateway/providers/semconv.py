"""The OpenTelemetry GenAI conventions' `gen_ai.provider.name` of each provider kind (here:
only providers/ names kinds; gateway/observability/tracing.py reads it)."""

from __future__ import annotations

GEN_AI_PROVIDERS = {
    "openai": "openai",
    "anthropic": "anthropic",
    "azure": "azure.ai.openai",
    "bedrock": "aws.bedrock",
    "gemini": "gcp.gemini",
    "vertex": "gcp.vertex_ai",
}
