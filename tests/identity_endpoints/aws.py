"""Fake AWS credential endpoints on one loopback port, as botocore reaches them:

- STS (`AWS_ENDPOINT_URL_STS`): the query protocol, `POST /` with a form body;
  `Action=AssumeRoleWithWebIdentity` (unsigned, the web identity token in the form) and
  `Action=AssumeRole` (SigV4-signed by credentials this fake issued, or by the static
  pair `BASE_KEY`), answered with the XML AWS documents (`...Response/...Result/
  Credentials`), errors as `ErrorResponse` with a 4xx;
- container credentials (`AWS_CONTAINER_CREDENTIALS_FULL_URI` = `/ecs/creds`, the token of
  `AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE` required in `Authorization`): JSON;
- IMDSv2 (`AWS_EC2_METADATA_SERVICE_ENDPOINT`): `PUT /latest/api/token` with a TTL header,
  then the role and its credentials under `/latest/meta-data/iam/security-credentials/`,
  each GET with the session token in `x-aws-ec2-metadata-token`.

Every issued credential expires `life_s` after it is issued, and is remembered (access key
id -> secret, session token) so a fake upstream can check what signed a request. Each call
is counted per action, with the thread it was served on.
"""

from __future__ import annotations

import secrets
import threading
import time
from datetime import UTC
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from tests.identity_endpoints.sigv4_check import verify
from tests.upstreams.threaded import ThreadedUpstream

ACCOUNT = "123456789012"
ROLE = "llm-gateway"
BASE_KEY = ("AKIAFAKEBASE0000001", "base/secret+key/0123456789abcdefghijklmn")
WEB_IDENTITY_TOKEN = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bGxtIn0.c2ln"
CONTAINER_TOKEN = "container-auth-token-0123456789"
NS = "https://sts.amazonaws.com/doc/2011-06-15/"


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class FakeAws(ThreadedUpstream):
    name = "fake-aws"

    def __init__(self, life_s: float = 3600.0) -> None:
        super().__init__()
        self.life_s = life_s
        self.issued: dict[str, tuple[str, str | None]] = {BASE_KEY[0]: (BASE_KEY[1], None)}
        self.calls: dict[str, int] = {}
        self.forms: list[dict[str, str]] = []
        self.lock = threading.Lock()
        self.refuse_web_identity = False
        self._imds_tokens: set[str] = set()
        self._serial = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/", self._sts)
        app.router.add_get("/ecs/creds", self._container)
        app.router.add_put("/latest/api/token", self._imds_token)
        app.router.add_get("/latest/meta-data/iam/security-credentials/", self._imds_role)
        app.router.add_get("/latest/meta-data/iam/security-credentials/{role}", self._imds_creds)

    def count(self, action: str) -> int:
        with self.lock:
            return self.calls.get(action, 0)

    def _counted(self, action: str) -> None:
        with self.lock:
            self.calls[action] = self.calls.get(action, 0) + 1

    def issue(self) -> dict[str, str]:
        with self.lock:
            self._serial += 1
            key = f"ASIAFAKE{self._serial:011d}"
            secret = secrets.token_urlsafe(30)
            token = "IQoJb3JpZ2luX2VjE" + secrets.token_urlsafe(60)
            self.issued[key] = (secret, token)
        return {
            "AccessKeyId": key,
            "SecretAccessKey": secret,
            "SessionToken": token,
            "Expiration": iso(time.time() + self.life_s),
        }

    # --- STS ----------------------------------------------------------------------------

    @staticmethod
    def _error(status: int, code: str, message: str) -> web.Response:
        body = (
            f'<ErrorResponse xmlns="{NS}"><Error><Type>Sender</Type><Code>{code}</Code>'
            f"<Message>{message}</Message></Error>"
            f"<RequestId>{secrets.token_hex(8)}</RequestId></ErrorResponse>"
        )
        return web.Response(status=status, body=body.encode(), content_type="text/xml")

    @staticmethod
    def _answer(action: str, result: str) -> web.Response:
        body = (
            f'<{action}Response xmlns="{NS}"><{action}Result>{result}</{action}Result>'
            f"<ResponseMetadata><RequestId>{secrets.token_hex(8)}</RequestId>"
            f"</ResponseMetadata></{action}Response>"
        )
        return web.Response(body=body.encode(), content_type="text/xml")

    @staticmethod
    def _credentials_xml(c: dict[str, str]) -> str:
        return (
            f"<Credentials><AccessKeyId>{c['AccessKeyId']}</AccessKeyId>"
            f"<SecretAccessKey>{c['SecretAccessKey']}</SecretAccessKey>"
            f"<SessionToken>{c['SessionToken']}</SessionToken>"
            f"<Expiration>{c['Expiration']}</Expiration></Credentials>"
        )

    async def _sts(self, request: web.Request) -> web.Response:
        raw = await request.read()
        form = {k: v[0] for k, v in parse_qs(raw.decode(), keep_blank_values=True).items()}
        action = form.get("Action", "")
        self._counted(action)
        with self.lock:
            self.forms.append(form)
        session = form.get("RoleSessionName", "")
        if action == "AssumeRoleWithWebIdentity":
            if self.refuse_web_identity or form.get("WebIdentityToken") != WEB_IDENTITY_TOKEN:
                return self._error(400, "InvalidIdentityToken", "the web identity token is invalid")
            c = self.issue()
            return self._answer(
                action,
                "<SubjectFromWebIdentityToken>system:serviceaccount:llm</SubjectFromWebIdentityToken>"
                "<Audience>sts.amazonaws.com</Audience>"
                f"<AssumedRoleUser><Arn>arn:aws:sts::{ACCOUNT}:assumed-role/{ROLE}/{session}</Arn>"
                f"<AssumedRoleId>AROAFAKE:{session}</AssumedRoleId></AssumedRoleUser>"
                f"{self._credentials_xml(c)}<Provider>oidc.eks.amazonaws.com</Provider>",
            )
        if action == "AssumeRole":
            with self.lock:
                known = dict(self.issued)
            try:
                verify(request.method, request.raw_path, request.headers, raw, known)
            except ValueError as exc:
                return self._error(403, "SignatureDoesNotMatch", str(exc))
            c = self.issue()
            return self._answer(
                action,
                f"<AssumedRoleUser><Arn>arn:aws:sts::{ACCOUNT}:assumed-role/x/{session}</Arn>"
                f"<AssumedRoleId>AROAFAKE2:{session}</AssumedRoleId></AssumedRoleUser>"
                f"{self._credentials_xml(c)}<PackedPolicySize>6</PackedPolicySize>",
            )
        return self._error(400, "InvalidAction", f"Could not find operation {action}")

    # --- container credentials -----------------------------------------------------------

    async def _container(self, request: web.Request) -> web.Response:
        self._counted("container")
        if request.headers.get("Authorization") != CONTAINER_TOKEN:
            return web.json_response({"message": "unauthorized"}, status=401)
        c = self.issue()
        return web.json_response(
            {
                "AccessKeyId": c["AccessKeyId"],
                "SecretAccessKey": c["SecretAccessKey"],
                "Token": c["SessionToken"],
                "Expiration": c["Expiration"],
            }
        )

    # --- IMDSv2 ------------------------------------------------------------------------

    async def _imds_token(self, request: web.Request) -> web.Response:
        self._counted("imds-token")
        if "x-aws-ec2-metadata-token-ttl-seconds" not in request.headers:
            return web.Response(status=400)
        token = secrets.token_urlsafe(24)
        self._imds_tokens.add(token)
        return web.Response(text=token)

    def _imds_allowed(self, request: web.Request) -> bool:
        return request.headers.get("x-aws-ec2-metadata-token") in self._imds_tokens

    async def _imds_role(self, request: web.Request) -> web.Response:
        if not self._imds_allowed(request):
            return web.Response(status=401)
        return web.Response(text=ROLE)

    async def _imds_creds(self, request: web.Request) -> web.Response:
        if not self._imds_allowed(request):
            return web.Response(status=401)
        if request.match_info["role"] != ROLE:
            return web.Response(status=404)
        self._counted("imds")
        c = self.issue()
        body: dict[str, Any] = {
            "Code": "Success",
            "LastUpdated": iso(time.time()),
            "Type": "AWS-HMAC",
            "AccessKeyId": c["AccessKeyId"],
            "SecretAccessKey": c["SecretAccessKey"],
            "Token": c["SessionToken"],
            "Expiration": c["Expiration"],
        }
        return web.json_response(body)
