"""Who may call the gateway: the master key (everything), virtual keys (inference routes,
their allowed models), or anyone when no master key is configured (an open gateway).

Identifying the caller makes no store call: a bearer that is not the master key is taken
for a virtual key, which the accounting store checks in the same call that admits the
request (gateway/accounting/service.py). The master key is compared in constant time;
a virtual key's secret is never compared at all, only its sha256 is looked up.
"""

from __future__ import annotations

from aiohttp import web

from gateway.accounting.service import ACCOUNTING
from gateway.accounting.service import Principal
from gateway.errors import AuthenticationFailed
from gateway.errors import PermissionDenied

PRINCIPAL = web.RequestKey("principal", Principal)
# set by the console (gateway/console/routes.py) on a request whose session and CSRF token
# it checked: the admin handlers behind /ui/api/ take it for the master key
CONSOLE_SIGNED_IN = web.RequestKey("console_signed_in", bool)


def bearer_token(request: web.Request, *, allow_x_api_key: bool = False) -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    if allow_x_api_key:
        return request.headers.get("x-api-key") or None
    return None


def authenticate(request: web.Request, *, allow_x_api_key: bool = False) -> Principal:
    """The caller of an inference route, remembered on the request under PRINCIPAL.
    `allow_x_api_key`: the key may come as `x-api-key` too (Anthropic clients send it so)."""
    accounting = request.app[ACCOUNTING]
    token = bearer_token(request, allow_x_api_key=allow_x_api_key)
    if token is None and accounting.config.auth.master_key:
        how = "'x-api-key: <key>' or " if allow_x_api_key else ""
        raise AuthenticationFailed(
            f"Missing API key: send it as {how}'Authorization: Bearer <key>'",
            code="missing_api_key",
        )
    principal = accounting.principal(token)
    request[PRINCIPAL] = principal
    return principal


async def authorize_admin(request: web.Request) -> None:
    """The admin API takes the master key only; with no master key configured it is
    closed to everyone (an open gateway must not hand out keys to anyone who asks)."""
    accounting = request.app[ACCOUNTING]
    if request.get(CONSOLE_SIGNED_IN) and accounting.config.auth.master_key:
        return
    if not accounting.config.auth.master_key:
        raise PermissionDenied(
            "The admin API is disabled: set auth.master_key to use it", code="admin_disabled"
        )
    principal = authenticate(request)
    if principal.kind == "master":
        return
    if await accounting.ledger.find_key(principal.secret_hash) is None and principal.static is None:
        raise AuthenticationFailed("Incorrect API key provided")
    raise PermissionDenied("The admin API needs the master key", code="master_key_required")


async def vouch_before_refusing(request: web.Request, err: Exception) -> Exception:
    """`err` (a refusal made before admission: an unknown model, no key available, a target
    that cannot take the request) once the caller's key is known to be good: a client with a
    wrong key learns nothing of the models or their health, only the 401. Off the hot path:
    only refusals pay the store lookup."""
    principal = request.get(PRINCIPAL)
    if principal is not None and principal.kind != "master" and principal.static is None:
        await request.app[ACCOUNTING].key_of(principal)  # raises 401 for a bad key
    return err
