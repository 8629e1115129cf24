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


def authorize(request: web.Request, master_key: Secret) -> None:
    """Open gateway when no master key is configured; otherwise the bearer must match it."""
    if not master_key:
        return
    token = bearer_token(request)
    if token is None:
        raise AuthenticationFailed(
            "Missing API key: send it as 'Authorization: Bearer <key>'", code="missing_api_key"
        )
    if not hmac.compare_digest(token.encode(), master_key.reveal().encode()):
        raise AuthenticationFailed("Incorrect API key provided")
