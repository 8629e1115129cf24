"""A fake Gemini API upstream that speaks the exact `streamGenerateContent?alt=sse` format:
one `data: {GenerateContentResponse}` per event, CRLF framing, no end marker, usage on
every event (not monotonic), function calls whole and without ids.

The model name in the URL path (`/v1beta/models/<scenario>:streamGenerateContent`) picks
the scenario:

  text           three text events, the last with finishReason STOP
  parallel-2     two calls in two events (get_weather, then get_user), finishReason STOP
  text-then-call text, then one call in the same event as finishReason STOP
  no-args        one call to `now` with no `args` at all (a parameterless function)
  fail-503 / fail-429   an HTTP error with a Google error body, before any content
  error-after    text, then a `{"error": ...}` event, then the stream ends

Non-streaming `:generateContent` answers the scenario as one response. Every request is
recorded (path, headers, JSON body). Runs on its own thread and loop.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream

CALLS = [
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("get_user", {"user_id": "u-42", "fields": ["name", "email"]}),
]
TEXT_PIECES = ["Hel", "lo, wor", "ld!"]
MODEL_VERSION = "gemini-fake-001"


class Recorded:
    def __init__(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        self.path = path
        self.headers = headers
        self.body = body


def usage(prompt: int, candidates: int | None, thoughts: int = 0) -> dict[str, Any]:
    u: dict[str, Any] = {"promptTokenCount": prompt}
    if candidates is not None:
        u["candidatesTokenCount"] = candidates
    if thoughts:
        u["thoughtsTokenCount"] = thoughts
    u["totalTokenCount"] = prompt + (candidates or 0) + thoughts
    u["promptTokensDetails"] = [{"modality": "TEXT", "tokenCount": prompt}]
    return u


def response(
    parts: list[dict[str, Any]], finish: str | None, use: dict[str, Any]
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}}
    if finish:
        candidate["finishReason"] = finish
    candidate["index"] = 0
    return {
        "candidates": [candidate],
        "usageMetadata": use,
        "modelVersion": MODEL_VERSION,
        "responseId": "fakeResponseId1",
    }


def call_part(i: int) -> dict[str, Any]:
    name, args = CALLS[i]
    return {"functionCall": {"name": name, "args": args}}


def events(scenario: str) -> list[dict[str, Any]]:
    # usage as Gemini sends it: a large prompt count on the first event, the real one last
    if scenario == "parallel-2":
        return [
            response([call_part(0)], None, usage(169, None)),
            response([call_part(1)], "STOP", usage(52, 18, 7)),
        ]
    if scenario == "no-args":
        return [response([{"functionCall": {"name": "now"}}], "STOP", usage(20, 3))]
    if scenario == "text-then-call":
        return [
            response([{"text": "Let me check."}], None, usage(169, None)),
            response([call_part(0)], "STOP", usage(52, 9)),
        ]
    last = len(TEXT_PIECES) - 1
    return [
        response([{"text": p}], "STOP" if i == last else None, usage(11 if i == last else 90, 7))
        for i, p in enumerate(TEXT_PIECES)
    ]


def sse(obj: dict[str, Any]) -> bytes:
    # Gemini's own spelling: ": " after keys, "," without a space, CRLF framing
    return b"data: " + json.dumps(obj, separators=(",", ": ")).encode() + b"\r\n\r\n"


def unary(scenario: str) -> dict[str, Any]:
    evs = events(scenario)
    parts = [p for e in evs for p in e["candidates"][0]["content"]["parts"]]
    merged = response(parts, "STOP", evs[-1]["usageMetadata"])
    if scenario == "text":
        merged["candidates"][0]["content"]["parts"] = [{"text": "".join(TEXT_PIECES)}]
    return merged


class FakeGemini(ThreadedUpstream):
    name = "fake-gemini"
    base_path = ""

    def __init__(self) -> None:
        super().__init__()
        self.token_requests: list[dict[str, Any]] = []
        self.requests: list[Recorded] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1beta/models/{model_action}", self._generate)
        # Vertex AI: the same API under a project/region path, and an OAuth token endpoint
        vertex = "/v1/projects/{project}/locations/{region}/publishers/google/models/"
        app.router.add_post(vertex + "{model_action}", self._generate)
        app.router.add_post("/token", self._token)

    async def _token(self, request: web.Request) -> web.Response:
        """A service-account JWT grant answered with an access token (RFC 7523)."""
        form = await request.post()
        self.token_requests.append(dict(form))
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer" or not form.get(
            "assertion"
        ):
            return web.json_response({"error": "invalid_grant"}, status=400)
        token = f"ya29.fake-{len(self.token_requests)}"
        return web.json_response(
            {"access_token": token, "expires_in": 3600, "token_type": "Bearer"}
        )

    async def _generate(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Recorded(request.path_qs, dict(request.headers), body))
        scenario, _, action = request.match_info["model_action"].partition(":")
        if scenario.startswith("fail-"):
            status = int(scenario.removeprefix("fail-"))
            google = {429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}.get(status, "INTERNAL")
            return web.json_response(
                {"error": {"code": status, "message": f"scenario {scenario}", "status": google}},
                status=status,
            )
        if action == "generateContent":
            return web.json_response(unary(scenario))
        if action != "streamGenerateContent" or request.query.get("alt") != "sse":
            return web.json_response(
                {"error": {"code": 404, "message": "no such method", "status": "NOT_FOUND"}},
                status=404,
            )
        response_ = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response_.prepare(request)
        if scenario == "error-after":
            await response_.write(sse(events("text")[0]))
            await asyncio.sleep(0.05)
            await response_.write(
                sse({"error": {"code": 500, "message": "model crashed", "status": "INTERNAL"}})
            )
            return response_
        blob = b"".join(sse(e) for e in events(scenario))
        # cut at odd places, as real networks deliver it (CR and LF of one CRLF split too)
        for start in range(0, len(blob), 61):
            await response_.write(blob[start : start + 61])
        return response_
