"""A fake Microsoft Entra ID authority over TLS, as msal (under azure-identity) reaches it
at `AZURE_AUTHORITY_HOST` = https://127.0.0.1:PORT:

- `GET /{tenant}/v2.0/.well-known/openid-configuration`: msal asks it even with instance
  discovery off, and takes the token endpoint (and the tenant) from it;
- `POST /{tenant}/oauth2/v2.0/token`, a form: `grant_type=client_credentials` with either
  `client_secret` (a service principal) or `client_assertion_type=...jwt-bearer` and
  `client_assertion` (workload identity's federated token), plus `client_id` and `scope`.
  Answered `{"token_type": "Bearer", "expires_in", "ext_expires_in", "access_token"}`;
  refusals as AAD words them (`invalid_client` with an AADSTS code, 401).

Every token is distinct, expires `life_s` after it is issued, and is remembered (token ->
scope, client id, expiry) so a fake upstream can check what a request carried. The server
certificate comes from a `Pki` (egress_parts.py); trust its CA with REQUESTS_CA_BUNDLE.
"""

from __future__ import annotations

import secrets
import ssl
import threading
import time
import uuid
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime

from aiohttp import web

from tests.upstream.egress_parts import Pki
from tests.upstreams.threaded import ThreadedUpstream

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT_ID = "0b6c1c5e-3a7d-4f1e-9d3c-6a2f1e8b9c01"
# a real client secret's shape: a `~` after six characters (the gateway cuts it from errors)
CLIENT_SECRET = "Ab38Q~" + "x7Yz.0123456789abcdefghijKLMNOPqrs"
FEDERATED_TOKEN = (
    "eyJhbGciOiJSUzI1NiIsImtpZCI6ImZha2UifQ."
    "eyJpc3MiOiJodHRwczovL29pZGMuZmFrZSIsInN1YiI6InN5c3RlbTpzZXJ2aWNlYWNjb3VudDpsbG0ifQ.c2lnbmF0dXJl"
)
JWT_BEARER = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
SCOPE = "https://cognitiveservices.azure.com/.default"


@dataclass
class Issued:
    scope: str
    client_id: str
    grant: str  # "secret" or "assertion"
    expires_at: float


class FakeEntra(ThreadedUpstream):
    name = "fake-entra"

    def __init__(self, pki: Pki, life_s: int = 3600) -> None:
        super().__init__()
        self.life_s = life_s
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(pki.server_cert, pki.server_key)
        self.issued: dict[str, Issued] = {}
        self.forms: list[dict[str, str]] = []
        self.discoveries = 0
        self.lock = threading.Lock()
        self.refuse = False  # answer every token request with AADSTS7000215

    @property
    def base_url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/{tenant}/v2.0/.well-known/openid-configuration", self._openid)
        app.router.add_post("/{tenant}/oauth2/v2.0/token", self._token)

    @property
    def token_posts(self) -> int:
        with self.lock:
            return len(self.forms)

    def stop(self) -> None:
        """Stoppable twice (a test stops it to take the authority down; the fixture again)."""
        if self._loop is not None and not self._loop.is_closed():
            super().stop()

    async def _start(self) -> None:
        app = web.Application()
        self.routes(app)
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=self.context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _openid(self, request: web.Request) -> web.Response:
        tenant = request.match_info["tenant"]
        with self.lock:
            self.discoveries += 1
        base = f"{self.base_url}/{tenant}"
        return web.json_response(
            {
                "token_endpoint": f"{base}/oauth2/v2.0/token",
                "authorization_endpoint": f"{base}/oauth2/v2.0/authorize",
                "device_authorization_endpoint": f"{base}/oauth2/v2.0/devicecode",
                "issuer": f"{base}/v2.0",
                "jwks_uri": f"{base}/discovery/v2.0/keys",
                "token_endpoint_auth_methods_supported": [
                    "client_secret_post",
                    "private_key_jwt",
                    "client_secret_basic",
                ],
                "response_types_supported": ["code", "id_token", "code id_token"],
                "tenant_region_scope": "EU",
            }
        )

    def _error(self, status: int, error: str, code: int, text: str) -> web.Response:
        now = datetime.now(UTC)
        trace = str(uuid.uuid4())
        return web.json_response(
            {
                "error": error,
                "error_description": f"AADSTS{code}: {text} Trace ID: {trace} "
                f"Correlation ID: {uuid.uuid4()} Timestamp: {now:%Y-%m-%d %H:%M:%SZ}",
                "error_codes": [code],
                "timestamp": f"{now:%Y-%m-%d %H:%M:%SZ}",
                "trace_id": trace,
                "correlation_id": str(uuid.uuid4()),
            },
            status=status,
        )

    async def _token(self, request: web.Request) -> web.Response:
        if request.match_info["tenant"] != TENANT:
            return self._error(400, "invalid_request", 90002, f"Tenant '{TENANT}' not found.")
        form = {k: str(v) for k, v in (await request.post()).items()}
        with self.lock:
            self.forms.append(form)
        if form.get("grant_type") != "client_credentials":
            return self._error(400, "unsupported_grant_type", 70003, "Unsupported grant type.")
        if form.get("client_id") != CLIENT_ID:
            return self._error(400, "unauthorized_client", 700016, "Application not found.")
        if self.refuse:
            return self._error(401, "invalid_client", 7000215, "Invalid client secret provided.")
        if "client_secret" in form:
            grant = "secret"
            if form["client_secret"] != CLIENT_SECRET:
                return self._error(
                    401, "invalid_client", 7000215, "Invalid client secret provided."
                )
        elif form.get("client_assertion_type") == JWT_BEARER:
            grant = "assertion"
            if form.get("client_assertion") != FEDERATED_TOKEN:
                return self._error(
                    400, "invalid_client", 700211, "No matching federated identity record."
                )
        else:
            return self._error(
                401, "invalid_client", 7000218, "The request body must contain client_secret."
            )
        scope = form.get("scope", "")
        token = "eyJ0eXAiOiJKV1QiLCJhbGciOiJSUzI1NiJ9." + secrets.token_urlsafe(48)
        with self.lock:
            self.issued[token] = Issued(scope, CLIENT_ID, grant, time.time() + self.life_s)
        return web.json_response(
            {
                "token_type": "Bearer",
                "expires_in": self.life_s,
                "ext_expires_in": self.life_s,
                "access_token": token,
            }
        )
