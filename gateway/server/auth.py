"""Who may call the gateway: the master key for now; virtual keys arrive with accounting."""

from __future__ import annotations

import hmac

from aiohttp import web

from gateway.config import Secret
from gateway.errors import AuthenticationFailed


def bearer_token(request: web.Request, *, allow_x_api_key: bool = False) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    if allow_x_api_key:
        return request.headers.get("x-api-key") or None
    return None


def authorize(request: web.Request, master_key: Secret, *, allow_x_api_key: bool = False) -> None:
    """Open gateway when no master key is configured; otherwise the bearer must match it.
    `allow_x_api_key`: the key may come as `x-api-key` too (Anthropic clients send it so)."""
    if not master_key:
        return
    token = bearer_token(request, allow_x_api_key=allow_x_api_key)
    if token is None:
        how = "'x-api-key: <key>' or " if allow_x_api_key else ""
        raise AuthenticationFailed(
            f"Missing API key: send it as {how}'Authorization: Bearer <key>'",
            code="missing_api_key",
        )
    if not hmac.compare_digest(token.encode(), master_key.reveal().encode()):
        raise AuthenticationFailed("Incorrect API key provided")
