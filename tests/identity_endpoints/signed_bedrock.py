"""The fake Bedrock runtime (tests/upstreams/bedrock_upstream.py) checking every request's
SigV4 signature against the credentials a `FakeAws` issued (the secret and the
X-Amz-Security-Token): a request signed with anything else is answered 403
`InvalidSignatureException`, as Bedrock does. Adds CountTokens (`/model/{m}/count-tokens`,
`{"inputTokens": n}`) and Titan embeddings (`/model/{m}/invoke`)."""

from __future__ import annotations

import json

from aiohttp import web

from tests.identity_endpoints.aws import FakeAws
from tests.identity_endpoints.sigv4_check import verify
from tests.upstreams.bedrock_upstream import FakeBedrock


class SignedBedrock(FakeBedrock):
    name = "fake-signed-bedrock"

    def __init__(self, aws: FakeAws) -> None:
        super().__init__()
        self.aws = aws
        self.signers: list[str] = []  # the access key id of every verified request

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/model/{model}/count-tokens", self._count_tokens)
        app.router.add_post("/model/{model}/invoke", self._invoke)
        super().routes(app)

    async def _check(self, request: web.Request) -> web.Response | None:
        raw = await request.read()
        with self.aws.lock:
            known = dict(self.aws.issued)
        try:
            self.signers.append(
                verify(request.method, request.raw_path, request.headers, raw, known)
            )
        except ValueError as exc:
            return web.json_response(
                {"message": f"The request signature we calculated does not match: {exc}"},
                status=403,
                headers={
                    "x-amzn-errortype": "InvalidSignatureException:http://internal.amazon.com/"
                },
            )
        return None

    async def _record(self, request: web.Request) -> str | web.Response:
        refused = await self._check(request)
        if refused is not None:
            return refused
        return await super()._record(request)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        refused = await self._check(request)
        if refused is not None:
            return refused
        body = json.loads(await request.read())
        messages = body["input"]["converse"]["messages"]
        return web.json_response({"inputTokens": 7 * len(messages)})

    async def _invoke(self, request: web.Request) -> web.Response:
        refused = await self._check(request)
        if refused is not None:
            return refused
        body = json.loads(await request.read())
        return web.json_response(
            {"embedding": [0.25, 0.5, 0.75], "inputTextTokenCount": len(body["inputText"].split())}
        )
