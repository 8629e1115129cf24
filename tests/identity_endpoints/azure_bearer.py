"""The fake Azure OpenAI upstream as an Entra ID token reaches it: `Authorization: Bearer`
with a token a `FakeEntra` issued, for the Cognitive Services scope and not expired (no
`api-key` with it), else Azure's 401. Each accepted request's token is recorded in
`bearers` (None for a request with the static `api-key`, still accepted); the request then
runs as FakeAzure's scenario. Adds the embeddings route FakeAzure lacks."""

from __future__ import annotations

import time

from aiohttp import web

from tests.identity_endpoints.entra import SCOPE
from tests.identity_endpoints.entra import FakeEntra
from tests.upstreams.azure_upstream import FakeAzure


def _denied(message: str) -> web.Response:
    return web.json_response({"error": {"code": "401", "message": message}}, status=401)


class BearerAzure(FakeAzure):
    name = "fake-azure-bearer"

    def __init__(self, entra: FakeEntra, key: str = "az-static-key") -> None:
        super().__init__(key)
        self.entra = entra
        self.bearers: list[str | None] = []
        self.refused: list[str] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._checked)
        app.router.add_post("/openai/deployments/{deployment}/embeddings", self._embeddings)

    def _check(self, request: web.Request) -> tuple[str | None, web.Response | None]:
        authorization = request.headers.get("Authorization")
        if authorization is None:
            if request.headers.get("api-key") == self.key:
                return None, None
            return None, _denied("Access denied due to invalid subscription key.")
        scheme, _, token = authorization.partition(" ")
        issued = self.entra.issued.get(token)
        if scheme != "Bearer" or issued is None or "api-key" in request.headers:
            self.refused.append(authorization)
            return None, _denied(
                "Unauthorized. Access token is missing, invalid, audience is "
                "incorrect (https://cognitiveservices.azure.com), or have expired."
            )
        if issued.scope != SCOPE or issued.expires_at <= time.time():
            self.refused.append(token)
            return None, _denied("Unauthorized. Access token has expired or audience is wrong.")
        return token, None

    async def _checked(self, request: web.Request) -> web.StreamResponse:
        token, denied = self._check(request)
        if denied is not None:
            return denied
        self.bearers.append(token)
        headers = {k: v for k, v in request.headers.items() if k.lower() != "authorization"}
        headers["api-key"] = self.key
        return await self._azure(request.clone(headers=headers))

    async def _embeddings(self, request: web.Request) -> web.Response:
        token, denied = self._check(request)
        if denied is not None:
            return denied
        if "api-version" not in request.query:
            return web.json_response(
                {"error": {"code": "404", "message": "Resource not found"}}, status=404
            )
        self.bearers.append(token)
        body = await request.json()
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        return web.json_response(
            {
                "object": "list",
                "data": [
                    {"object": "embedding", "index": i, "embedding": [0.125, 0.25, 0.5]}
                    for i, _ in enumerate(inputs)
                ],
                "model": "text-embedding-3-small",
                "usage": {"prompt_tokens": 3, "total_tokens": 3},
            }
        )
