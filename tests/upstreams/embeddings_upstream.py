"""A fake upstream serving the embeddings endpoint of every provider kind, each in its own
wire format:

  POST /v1/embeddings                                   OpenAI (base_url `{base}/v1`)
  POST /openai/deployments/{deployment}/embeddings      Azure, dated api-version
  POST /openai/v1/embeddings                            Azure v1
  POST /v1beta/models/{model}:batchEmbedContents        Gemini API (100 requests at most)
  POST /v1/projects/{p}/locations/{r}/publishers/google/models/{model}:predict
                                                        Vertex AI (250 instances at most,
                                                        one for gemini-embedding-*)
  POST /token                                           Google OAuth token (JWT grant)
  POST /model/{model}/invoke                            Bedrock Titan (one inputText) or
                                                        Cohere embed (96 texts at most)
  POST /api/embed                                       Ollama

Every vector is `fake_vector(text)` (float32-exact values, `dimensions` long when asked,
4 otherwise) and every token count `fake_tokens(text)`, so tests can check values, order and
usage. The model name picks the scenario: `fail-500` answers HTTP 500 and `fail-400` HTTP 400
(Vertex's `echo-credential`: a 400 quoting the Authorization header it was sent),
each in the provider's error format; anything else succeeds, except a Titan `inputText` of
`FAIL`, answered HTTP 503 (one failing part of a split request), and OpenAI's `slow`,
answered after five seconds. A batch over the provider's cap
is a 400, as upstream. Every request is recorded (raw path, lower-cased headers, raw body).
"""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream


def fake_vector(text: str, dimensions: int = 4) -> list[float]:
    """Multiples of 1/64: exact in float32."""
    first = ord(text[0]) % 64 if text else 0
    rest = [(i % 8) / 8 - 0.5 for i in range(max(0, dimensions - 2))]
    return [(len(text) % 64) / 64, first / 64, *rest][:dimensions]


def fake_tokens(text: str) -> int:
    return len(text.split()) + 1


class Recorded:
    def __init__(self, path: str, headers: dict[str, str], raw: bytes) -> None:
        self.path = path
        self.headers = headers
        self.raw = raw
        self.body: Any = json.loads(raw) if raw else None


def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(data), status=status, content_type="application/json", headers=headers
    )


class FakeEmbeddings(ThreadedUpstream):
    name = "fake-embeddings"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Recorded] = []
        self.token_requests: list[dict[str, Any]] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/embeddings", self._openai)
        app.router.add_post("/openai/deployments/{model}/embeddings", self._openai)
        app.router.add_post("/openai/v1/embeddings", self._openai)
        app.router.add_post("/v1beta/models/{action}", self._gemini)
        vertex = "/v1/projects/{project}/locations/{region}/publishers/google/models/{action}"
        app.router.add_post(vertex, self._vertex)
        app.router.add_post("/token", self._token)
        app.router.add_post("/model/{model}/invoke", self._bedrock)
        app.router.add_post("/api/embed", self._ollama)

    async def _record(self, request: web.Request) -> Recorded:
        raw = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        seen = Recorded(request.raw_path, headers, raw)
        self.requests.append(seen)
        return seen

    # --- OpenAI and Azure -------------------------------------------------------------

    async def _openai(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        body = seen.body
        model = request.match_info.get("model") or body["model"]
        if model == "slow":
            await asyncio.sleep(5)
        if model.startswith("fail-"):
            status = int(model.removeprefix("fail-"))
            error = {"message": f"fake failure {status}", "type": "invalid_request_error"}
            error.update(param="input" if status == 400 else None, code=None)
            return _json({"error": error}, status)
        items = body["input"]
        if isinstance(items, str) or (items and isinstance(items[0], int)):
            items = [items]
        dims = body.get("dimensions") or 4
        texts = [i if isinstance(i, str) else " ".join(map(str, i)) for i in items]
        data = []
        for index, text in enumerate(texts):
            vector: Any = fake_vector(text, dims)
            if body.get("encoding_format") == "base64":
                vector = base64.b64encode(struct.pack(f"<{dims}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": vector})
        tokens = sum(fake_tokens(t) for t in texts)
        # answered in reverse order: the gateway must place vectors by index
        return _json(
            {
                "object": "list",
                "data": data[::-1],
                "model": model,
                "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
            }
        )

    # --- Google -----------------------------------------------------------------------

    @staticmethod
    def _google_error(status: int, message: str) -> web.Response:
        kind = "INVALID_ARGUMENT" if status == 400 else "INTERNAL"
        return _json({"error": {"code": status, "message": message, "status": kind}}, status)

    async def _gemini(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        model, _, action = request.match_info["action"].partition(":")
        if action != "batchEmbedContents":
            return self._google_error(404, f"unknown action {action}")
        if model.startswith("fail-"):
            return self._google_error(int(model.removeprefix("fail-")), "fake failure")
        requests = seen.body["requests"]
        if len(requests) > 100:
            return self._google_error(
                400,
                "* BatchEmbedContentsRequest.requests: at most 100 requests can be in one batch",
            )
        out = []
        for item in requests:
            if item["model"] != f"models/{model}":
                return self._google_error(400, "model mismatch")
            text = item["content"]["parts"][0]["text"]
            out.append({"values": fake_vector(text, item.get("outputDimensionality", 4))})
        return _json({"embeddings": out})

    async def _token(self, request: web.Request) -> web.Response:
        form = await request.post()
        self.token_requests.append(dict(form))
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return _json({"error": "invalid_grant"}, 400)
        token = f"ya29.fake-{len(self.token_requests)}"
        return _json({"access_token": token, "expires_in": 3600, "token_type": "Bearer"})

    async def _vertex(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        model, _, action = request.match_info["action"].partition(":")
        if action != "predict":
            return self._google_error(404, f"unknown action {action}")
        if model.startswith("fail-"):
            return self._google_error(int(model.removeprefix("fail-")), "fake failure")
        if model == "echo-credential":
            # as a proxy or a misbehaving server may: the credential it was sent, quoted
            credential = request.headers.get("Authorization", "")
            return self._google_error(400, f"credential {credential} is not allowed here")
        instances = seen.body["instances"]
        cap = 1 if model.startswith("gemini-embedding") else 250
        if len(instances) > cap:
            return self._google_error(400, f"at most {cap} instances per request")
        dims = (seen.body.get("parameters") or {}).get("outputDimensionality", 4)
        predictions = [
            {
                "embeddings": {
                    "statistics": {"truncated": False, "token_count": fake_tokens(i["content"])},
                    "values": fake_vector(i["content"], dims),
                }
            }
            for i in instances
        ]
        return _json({"predictions": predictions, "metadata": {"billableCharacterCount": 1}})

    # --- Bedrock ----------------------------------------------------------------------

    async def _bedrock(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        model = request.match_info["model"]
        if model.startswith("fail-"):
            status = int(model.removeprefix("fail-"))
            kind = "ValidationException" if status == 400 else "InternalServerException"
            return _json(
                {"message": "fake failure"}, status, headers={"x-amzn-errortype": f"{kind}:http"}
            )
        body = seen.body
        if "titan-embed" in model:
            text = body["inputText"]
            if not isinstance(text, str):
                return _json({"message": "inputText must be a string"}, 400)
            if text == "FAIL":
                headers = {"x-amzn-errortype": "ServiceUnavailableException:http"}
                return _json({"message": "fake outage"}, 503, headers=headers)
            return _json(
                {
                    "embedding": fake_vector(text, body.get("dimensions", 4)),
                    "inputTextTokenCount": fake_tokens(text),
                    "embeddingsByType": {"float": fake_vector(text, body.get("dimensions", 4))},
                }
            )
        texts = body["texts"]
        if len(texts) > 96 or not body.get("input_type"):
            return _json({"message": "Malformed input request"}, 400)
        vectors = [fake_vector(t, body.get("output_dimension", 4)) for t in texts]
        tokens = sum(fake_tokens(t) for t in texts)
        answer: dict[str, Any] = {"id": "emb-1", "texts": texts}
        if body.get("embedding_types"):
            answer.update(response_type="embeddings_by_type", embeddings={"float": vectors})
        else:
            answer.update(response_type="embeddings_floats", embeddings=vectors)
        # v3 answers carry no meta on Bedrock: the count is only in the header
        if "v4" in model:
            answer["meta"] = {"billed_units": {"input_tokens": tokens}}
        return _json(answer, headers={"X-Amzn-Bedrock-Input-Token-Count": str(tokens)})

    # --- Ollama -----------------------------------------------------------------------

    async def _ollama(self, request: web.Request) -> web.Response:
        seen = await self._record(request)
        body = seen.body
        model = body["model"]
        if model.startswith("fail-"):
            return _json({"error": "fake failure"}, int(model.removeprefix("fail-")))
        texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dims = body.get("dimensions") or 4
        return _json(
            {
                "model": model,
                "embeddings": [fake_vector(t, dims) for t in texts],
                "total_duration": 14143917,
                "load_duration": 1019500,
                "prompt_eval_count": sum(fake_tokens(t) for t in texts),
            }
        )
