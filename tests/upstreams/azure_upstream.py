"""A fake Azure OpenAI upstream: both path styles, `api-key` auth, content-filter annotations.

Routes: `POST /openai/deployments/{deployment}/chat/completions` (the scenario is the
deployment; `api-version` is required, as Azure requires it) and `POST
/openai/v1/chat/completions` (the scenario is the body's `model`). Every request is recorded
with its path, query, headers and JSON body in `calls` (and, as FakeOpenAI records
them, headers and body in `requests`).

Scenarios:

  text             Azure's stream: a first chunk with `choices: []` and
                   `prompt_filter_results` (empty id, model and object, as Azure sends it),
                   the role chunk, content chunks each with `content_filter_results`, the
                   finish chunk, a usage chunk when `include_usage`, `[DONE]`; unary: a
                   completion with `prompt_filter_results` and `content_filter_results`
  filtered         content, then `finish_reason: "content_filter"` (the output was filtered)
  content-filter   HTTP 400 with Azure's content_filter error body (the prompt was filtered)
  fail-500 / fail-429               an HTTP error with an Azure error body
  anything else    FakeOpenAI's scenario of that name (tool calls, stream errors...), so the
                   conformance suite can drive this fake too

A key other than `api-key` set (or an `Authorization` header instead) gets Azure's 401.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.upstreams.openai_upstream import TEXT_PIECES
from tests.upstreams.openai_upstream import FakeOpenAI
from tests.upstreams.openai_upstream import Recorded

SAFE = {"filtered": False, "severity": "safe"}
FILTERS = {"hate": SAFE, "self_harm": SAFE, "sexual": SAFE, "violence": SAFE}
PROMPT_FILTER_RESULTS = [{"prompt_index": 0, "content_filter_results": FILTERS}]
MODEL_VERSION = "gpt-4o-2024-11-20"
USAGE = {
    "prompt_tokens": 9,
    "completion_tokens": 5,
    "total_tokens": 14,
    "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
    "completion_tokens_details": {"reasoning_tokens": 0},
}
CONTENT_FILTER_ERROR = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
        "content management policy. Please modify your prompt and retry.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {
                "hate": {"filtered": True, "severity": "high"},
                "self_harm": SAFE,
                "sexual": SAFE,
                "violence": SAFE,
            },
        },
    }
}


class AzureRecorded:
    def __init__(
        self, path: str, query: dict[str, str], headers: dict[str, str], body: dict[str, Any]
    ) -> None:
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body


class FakeAzure(FakeOpenAI):
    name = "fake-azure"
    base_path = ""

    def __init__(self, key: str = "az-key") -> None:
        super().__init__()
        self.key = key
        self.calls: list[AzureRecorded] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/openai/deployments/{deployment}/chat/completions", self._azure)
        app.router.add_post("/openai/v1/chat/completions", self._azure)

    async def _azure(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.calls.append(
            AzureRecorded(request.path, dict(request.query), dict(request.headers), body)
        )
        self.requests.append(Recorded(dict(request.headers), body))  # as FakeOpenAI records
        deployment = request.match_info.get("deployment")
        if request.headers.get("api-key") != self.key:
            return web.json_response(
                {
                    "error": {
                        "code": "401",
                        "message": "Access denied due to invalid subscription key or wrong "
                        "API endpoint.",
                    }
                },
                status=401,
            )
        if deployment is not None and "api-version" not in request.query:
            return web.json_response(
                {"error": {"code": "404", "message": "Resource not found"}}, status=404
            )
        scenario = deployment if deployment is not None else str(body.get("model", "text"))
        if scenario == "content-filter":
            return web.json_response(CONTENT_FILTER_ERROR, status=400)
        if scenario.startswith("fail-"):
            status = int(scenario.removeprefix("fail-"))
            return web.json_response(
                {"error": {"code": str(status), "message": f"scenario {scenario}"}},
                status=status,
            )
        if scenario not in ("text", "filtered"):
            return await self._as_openai(request, scenario, body)
        if not body.get("stream"):
            return web.json_response(self._azure_completion(scenario))
        usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        blob = b"".join(self._azure_events(scenario, usage_on))
        for start in range(0, len(blob), 113):  # cut at odd places, as networks deliver
            await response.write(blob[start : start + 113])
        return response

    async def _as_openai(
        self, request: web.Request, scenario: str, body: dict[str, Any]
    ) -> web.StreamResponse:
        if scenario == "silent":
            await asyncio.sleep(3600)
        if not body.get("stream"):
            return web.json_response(self._completion(scenario))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await self._stream(scenario, body, response)
        return response

    @staticmethod
    def _event(data: dict[str, Any]) -> bytes:
        return b"data: " + json.dumps(data, separators=(",", ":")).encode() + b"\n\n"

    def _azure_chunk(
        self, delta: dict[str, Any] | None, finish: str | None = None, **extra: Any
    ) -> bytes:
        choices: list[dict[str, Any]] = []
        if delta is not None:
            filters: dict[str, Any] = FILTERS if delta.get("content") else {}
            if finish == "content_filter":
                filters = {**FILTERS, "violence": {"filtered": True, "severity": "medium"}}
            choices.append(
                {
                    "content_filter_results": filters,
                    "delta": delta,
                    "finish_reason": finish,
                    "index": 0,
                    "logprobs": None,
                }
            )
        return self._event(
            {
                "choices": choices,
                "created": 1754693439,
                "id": "chatcmpl-azure",
                "model": MODEL_VERSION,
                "object": "chat.completion.chunk",
                "system_fingerprint": "fp_azure",
                **extra,
            }
        )

    def _azure_events(self, scenario: str, usage_on: bool) -> list[bytes]:
        events = [
            self._event(
                {
                    "choices": [],
                    "created": 0,
                    "id": "",
                    "model": "",
                    "object": "",
                    "prompt_filter_results": PROMPT_FILTER_RESULTS,
                }
            ),
            self._azure_chunk({"content": "", "refusal": None, "role": "assistant"}),
        ]
        pieces = TEXT_PIECES if scenario == "text" else TEXT_PIECES[:2]
        events += [self._azure_chunk({"content": p}) for p in pieces]
        events.append(self._azure_chunk({}, "stop" if scenario == "text" else "content_filter"))
        if usage_on:
            events.append(self._azure_chunk(None, usage=USAGE))
        events.append(b"data: [DONE]\n\n")
        return events

    def _azure_completion(self, scenario: str) -> dict[str, Any]:
        filtered = scenario == "filtered"
        return {
            "choices": [
                {
                    "content_filter_results": FILTERS,
                    "finish_reason": "content_filter" if filtered else "stop",
                    "index": 0,
                    "logprobs": None,
                    "message": {
                        "annotations": [],
                        "content": "".join(TEXT_PIECES[:2] if filtered else TEXT_PIECES),
                        "refusal": None,
                        "role": "assistant",
                    },
                }
            ],
            "created": 1754693439,
            "id": "chatcmpl-azure-unary",
            "model": MODEL_VERSION,
            "object": "chat.completion",
            "prompt_filter_results": PROMPT_FILTER_RESULTS,
            "system_fingerprint": "fp_azure",
            "usage": USAGE,
        }
