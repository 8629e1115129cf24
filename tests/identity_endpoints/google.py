"""Google's token endpoints as google-auth meets them, on one loopback server, and a Gemini /
Vertex AI upstream that accepts only the tokens they issued.

`FakeGoogleIdentity` answers, as the real services do:
- the metadata server (GCE, Cloud Run, GKE Workload Identity; `GCE_METADATA_HOST` and
  `GCE_METADATA_IP` point at it): `GET /` (google-auth's ping) and everything under
  `/computeMetadata/v1/`, only for a request with `Metadata-Flavor: Google` (else 403) and
  always answering with that header; the default service account's info
  (`?recursive=true`) and token (`access_token`, `expires_in`), the project id;
- the Security Token Service (workload identity federation from a file-sourced OIDC
  token): `POST /v1/token`, an RFC 8693 token exchange (form: grant_type, audience, scope,
  requested_token_type, subject_token, subject_token_type);
- the IAM Credentials API: `POST /v1/projects/-/serviceAccounts/{email}:generateAccessToken`
  (JSON: scope, lifetime, delegates) for a caller bearing a token this fake issued;
  `{"accessToken", "expireTime"}`.
Every token it issues is kept in `issued` (token -> who it stands for, how, scopes, expiry)
and every call in `calls`; `refuse` makes every endpoint answer its error instead.

`BearerGemini` is FakeGemini (tests/upstreams/gemini_upstream.py) behind Google's 401 for a
missing, unknown or expired bearer, plus the embeddings operations (Vertex `:predict`,
Gemini `:batchEmbedContents`); `bearers` lists each accepted request's token.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from typing import Any

from aiohttp import web

from tests.upstreams.gemini_upstream import FakeGemini
from tests.upstreams.threaded import ThreadedUpstream

NODE_ACCOUNT = "gke-node@test-project.iam.gserviceaccount.com"
TARGET_ACCOUNT = "llm-caller@test-project.iam.gserviceaccount.com"
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
AUDIENCE = (
    "//iam.googleapis.com/projects/123456789/locations/global/workloadIdentityPools/"
    "aks-pool/providers/aks-oidc"
)
SUBJECT_TOKEN = "eyJhbGciOiJSUzI1NiJ9.oidc-subject-token-from-the-kubelet.sig"
TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:access_token"
JWT_TOKEN_TYPE = "urn:ietf:params:oauth:token-type:jwt"
FLAVOR = {"Metadata-Flavor": "Google"}


@dataclass(frozen=True)
class Issued:
    principal: str  # the account (or federated identity) the token stands for
    how: str  # "metadata" | "sts" | "iam"
    scopes: tuple[str, ...]
    expires_at: float


def _google_error(status: int, message: str, reason: str) -> web.Response:
    return web.json_response(
        {"error": {"code": status, "message": message, "status": reason}}, status=status
    )


class FakeGoogleIdentity(ThreadedUpstream):
    name = "fake-google-identity"

    def __init__(self, life_s: int = 3600) -> None:
        super().__init__()
        self.life_s = life_s
        self.issued: dict[str, Issued] = {}
        self.calls: list[str] = []  # "METHOD path" of every request
        self.forms: list[dict[str, str]] = []  # the STS exchanges' forms
        self.iam_bodies: list[dict[str, Any]] = []
        self.refuse = False

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        app.router.add_get("/", self._ping)
        app.router.add_get("/computeMetadata/v1/{path:.*}", self._metadata)
        app.router.add_post("/v1/token", self._sts)
        app.router.add_post(
            "/v1/projects/-/serviceAccounts/{account_action}", self._generate_access_token
        )

    def _issue(self, principal: str, how: str, scopes: tuple[str, ...]) -> tuple[str, int]:
        token = f"ya29.{how}-{secrets.token_urlsafe(24)}"
        self.issued[token] = Issued(principal, how, scopes, time.time() + self.life_s)
        return token, self.life_s

    def valid(self, authorization: str | None) -> Issued | None:
        """What a request's `Authorization` header stands for, if it is a live token of ours."""
        scheme, _, token = (authorization or "").partition(" ")
        issued = self.issued.get(token)
        if scheme != "Bearer" or issued is None or issued.expires_at <= time.time():
            return None
        return issued

    async def _ping(self, request: web.Request) -> web.Response:
        self.calls.append(f"GET {request.path_qs}")
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(status=403, text="Missing Metadata-Flavor:Google header.")
        return web.Response(text="computeMetadata/\n", headers=FLAVOR)

    async def _metadata(self, request: web.Request) -> web.Response:
        self.calls.append(f"GET {request.path_qs}")
        if request.headers.get("Metadata-Flavor") != "Google":
            return web.Response(
                status=403, text="Missing Metadata-Flavor:Google header.", headers=FLAVOR
            )
        path = request.match_info["path"]
        if self.refuse:
            return web.Response(status=404, text="service account not found", headers=FLAVOR)
        if path == "project/project-id":
            return web.Response(text="test-project", headers=FLAVOR)
        if path == "universe/universe-domain":
            return web.Response(text="googleapis.com", headers=FLAVOR)
        account, _, rest = path.removeprefix("instance/service-accounts/").partition("/")
        if not path.startswith("instance/service-accounts/") or account not in (
            "default",
            NODE_ACCOUNT,
        ):
            return web.Response(status=404, text="Not Found", headers=FLAVOR)
        if rest == "" and request.query.get("recursive") == "true":
            info = {"aliases": ["default"], "email": NODE_ACCOUNT, "scopes": [CLOUD_PLATFORM]}
            return web.json_response(info, headers=FLAVOR)
        if rest == "email":
            return web.Response(text=NODE_ACCOUNT, headers=FLAVOR)
        if rest == "token":
            scopes = tuple(filter(None, request.query.get("scopes", CLOUD_PLATFORM).split(",")))
            token, life = self._issue(NODE_ACCOUNT, "metadata", scopes)
            body = {"access_token": token, "expires_in": life, "token_type": "Bearer"}
            return web.json_response(body, headers=FLAVOR)
        return web.Response(status=404, text="Not Found", headers=FLAVOR)

    async def _sts(self, request: web.Request) -> web.Response:
        self.calls.append(f"POST {request.path_qs}")
        form = {k: str(v) for k, v in (await request.post()).items()}
        self.forms.append(form)
        if self.refuse or form.get("subject_token") != SUBJECT_TOKEN:
            return web.json_response(
                {"error": "invalid_grant", "error_description": "The subject token is invalid."},
                status=400,
            )
        if (
            form.get("grant_type") != TOKEN_EXCHANGE
            or form.get("audience") != AUDIENCE
            or form.get("requested_token_type") != ACCESS_TOKEN_TYPE
            or form.get("subject_token_type") != JWT_TOKEN_TYPE
        ):
            return web.json_response(
                {"error": "invalid_request", "error_description": "bad token exchange"},
                status=400,
            )
        scopes = tuple(form.get("scope", "").split())
        token, life = self._issue(f"principal://{AUDIENCE[2:]}", "sts", scopes)
        return web.json_response(
            {
                "access_token": token,
                "issued_token_type": ACCESS_TOKEN_TYPE,
                "token_type": "Bearer",
                "expires_in": life,
            }
        )

    async def _generate_access_token(self, request: web.Request) -> web.Response:
        self.calls.append(f"POST {request.path_qs}")
        account, _, action = request.match_info["account_action"].partition(":")
        if action != "generateAccessToken":
            return _google_error(404, "Method not found.", "NOT_FOUND")
        caller = self.valid(request.headers.get("Authorization"))
        if caller is None:
            return _google_error(
                401, "Request had invalid authentication credentials.", "UNAUTHENTICATED"
            )
        body = await request.json()
        self.iam_bodies.append(body)
        if self.refuse or account != TARGET_ACCOUNT:
            return _google_error(
                403,
                f"Permission 'iam.serviceAccounts.getAccessToken' denied on resource "
                f"(or it may not exist): projects/-/serviceAccounts/{account}",
                "PERMISSION_DENIED",
            )
        token, life = self._issue(account, "iam", tuple(body.get("scope", [])))
        expire = datetime.fromtimestamp(time.time() + life, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return web.json_response({"accessToken": token, "expireTime": expire})


class BearerGemini(FakeGemini):
    name = "fake-gemini-bearer"

    def __init__(self, identity: FakeGoogleIdentity, api_key: str = "gm-static-key") -> None:
        super().__init__()
        self.identity = identity
        self.api_key = api_key
        self.bearers: list[str | None] = []  # None: a request with the static API key
        self.refused: list[str] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1beta/models/{model_action}", self._checked)
        vertex = "/v1/projects/{project}/locations/{region}/publishers/google/models/"
        app.router.add_post(vertex + "{model_action}", self._checked)

    async def _checked(self, request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("Authorization")
        if authorization is None and request.headers.get("x-goog-api-key") == self.api_key:
            self.bearers.append(None)
        else:
            issued = self.identity.valid(authorization)
            if issued is None or CLOUD_PLATFORM not in issued.scopes:
                self.refused.append(authorization or "")
                return _google_error(
                    401,
                    "Request had invalid authentication credentials. Expected OAuth 2 access "
                    "token, login cookie or other valid authentication credential.",
                    "UNAUTHENTICATED",
                )
            self.bearers.append(authorization.partition(" ")[2] if authorization else None)
        action = request.match_info["model_action"].partition(":")[2]
        if action == "predict":  # Vertex AI text embeddings
            body = await request.json()
            predictions = [
                {"embeddings": {"values": [0.5, 0.25], "statistics": {"token_count": 2}}}
                for _ in body["instances"]
            ]
            return web.json_response({"predictions": predictions})
        if action == "batchEmbedContents":
            body = await request.json()
            return web.json_response(
                {"embeddings": [{"values": [0.5, 0.25]} for _ in body["requests"]]}
            )
        return await self._generate(request)
