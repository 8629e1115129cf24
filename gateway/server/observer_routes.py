"""The routes that get a trace, and each one's `gen_ai.operation.name` (a leaf module: the
middleware and the observers both read it)."""

from __future__ import annotations

TRACED_ROUTES = {
    "/v1/chat/completions": "chat",
    "/v1/responses": "chat",
    "/v1/messages": "chat",
    "/v1/embeddings": "embeddings",
    "/v1/messages/count_tokens": "count_tokens",
}
