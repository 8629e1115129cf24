"""A fake upstream that answers every path and records what the gateway sent it: the
request target exactly as it came on the wire (`raw_path`), the Host header and every
other header. It stands in for any provider kind: what it answers is an error, so the
gateway makes one attempt and answers the client at once.

The model (the body's `model`, else the path) names the answer:

  echo-<status>   that status with an OpenAI-shaped body whose message quotes the credential
                  the gateway sent ("Incorrect API key provided: <key>"), as some upstreams
                  do, and the same text in an `x-echo` header
  anything else   400 `recorded` (a refusal of the request: no retry, no failover)

`POST /token` is a Google OAuth token endpoint (a service-account JWT grant), answering
ACCESS_TOKEN, for `vertex` providers.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream

ACCESS_TOKEN = "ya29.vertex-access-token-SECRET-5b1c0e"
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "api-key", "x-goog-api-key")


@dataclass
class Seen:
    method: str
    raw_path: str
    host: str
    headers: dict[str, str]  # names lower-cased
    body: bytes


class Recorder(ThreadedUpstream):
    name = "recorder"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Seen] = []
        self.token_requests = 0

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/token", self._token)
        app.router.add_route("*", "/{tail:.*}", self._any)

    async def _token(self, request: web.Request) -> web.Response:
        await request.read()
        self.token_requests += 1
        return web.json_response(
            {"access_token": ACCESS_TOKEN, "expires_in": 3600, "token_type": "Bearer"}
        )

    async def _any(self, request: web.Request) -> web.Response:
        raw = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.seen.append(Seen(request.method, request.raw_path, request.host, headers, raw))
        echo = re.search(r"echo-(\d{3})", _model(raw) or request.raw_path)
        if echo is None:
            return _error(400, "recorded")
        credential = " ".join(headers[h] for h in CREDENTIAL_HEADERS if h in headers)
        text = f"Incorrect API key provided: {credential}"
        return _error(int(echo.group(1)), text, {"x-echo": text.replace("\n", " ")})


def _model(raw: bytes) -> str | None:
    try:
        body: Any = json.loads(raw)
    except ValueError:
        return None
    model = body.get("model") if isinstance(body, dict) else None
    return model if isinstance(model, str) else None


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error", "code": "x"}}
    return web.json_response(body, status=status, headers=headers)
