"""A fake Ollama upstream speaking the native `/api/chat` API: NDJSON streaming
(`application/x-ndjson`, one `ChatResponse` per line, the last `done: true` with the
counters), whole tool calls with server ids and `function.index`, and `{"error": ...}`
bodies. The model name in the JSON body picks the scenario:

  text        three content lines, then done (done_reason "stop")
  two-calls   two calls in two lines (get_weather, then get_user), done_reason "stop"
  error-mid   one content line, then a bare `{"error": ...}` line, HTTP status still 200
  fail-500    an HTTP 500 with `{"error": ...}`, before any content
  text-then-call   the three content lines, then one get_weather call, done_reason "stop"
  no-args     one call to `now` whose arguments are `{}`
  error-before     a 200 stream whose first line is a bare `{"error": ...}` (the runner
                   failed after the headers went out, before any token)
  fail-429    an HTTP 429 with `{"error": ...}` (ollama.com's usage limit, or a proxy's)

`"stream": false` answers the scenario as one JSON object. Every request is recorded
(path, headers, JSON body). Runs on its own thread and loop.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream

CALLS: list[tuple[str, dict[str, Any]]] = [
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("get_user", {"user_id": "u-42", "fields": ["name", "email"]}),
]
CALL_IDS = ["call_k3x9q2ab", "call_p0z7w1cd"]
TEXT_PIECES = ["Hel", "lo, wor", "ld!"]
ERROR = "an error was encountered while running the model"
PROMPT_TOKENS = 31
EVAL_TOKENS = 12


class Recorded:
    def __init__(self, path: str, headers: dict[str, str], body: dict[str, Any]) -> None:
        self.path = path
        self.headers = headers
        self.body = body


def line(model: str, message: dict[str, Any], done: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {
        "model": model,
        "created_at": "2025-12-02T09:51:18.4437234Z",
        "message": {"role": "assistant", "content": "", **message},
        "done": done,
    }
    if done:
        out.update(
            done_reason="stop",
            total_duration=49235573,
            load_duration=3530522,
            prompt_eval_count=PROMPT_TOKENS,
            prompt_eval_duration=4145222,
            eval_count=EVAL_TOKENS,
            eval_duration=9719530,
        )
    return out


def tool_call(i: int) -> dict[str, Any]:
    name, args = CALLS[i]
    return {"id": CALL_IDS[i], "function": {"index": i, "name": name, "arguments": args}}


NOW_CALL: dict[str, Any] = {
    "id": "call_n0w4rg5x",
    "function": {"index": 0, "name": "now", "arguments": {}},
}


def lines(scenario: str) -> list[dict[str, Any]]:
    if scenario == "two-calls":
        body = [line(scenario, {"tool_calls": [tool_call(i)]}) for i in range(len(CALLS))]
    elif scenario == "text-then-call":
        body = [line(scenario, {"content": p}) for p in TEXT_PIECES]
        body.append(line(scenario, {"tool_calls": [tool_call(0)]}))
    elif scenario == "no-args":
        body = [line(scenario, {"tool_calls": [NOW_CALL]})]
    else:
        body = [line(scenario, {"content": p}) for p in TEXT_PIECES]
    return [*body, line(scenario, {}, done=True)]


def unary(scenario: str) -> dict[str, Any]:
    message: dict[str, Any] = {}
    if scenario == "two-calls":
        message["tool_calls"] = [tool_call(i) for i in range(len(CALLS))]
    elif scenario == "no-args":
        message["tool_calls"] = [NOW_CALL]
    elif scenario == "text-then-call":
        message["content"] = "".join(TEXT_PIECES)
        message["tool_calls"] = [tool_call(0)]
    else:
        message["content"] = "".join(TEXT_PIECES)
    return line(scenario, message, done=True)


def ndjson(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


class FakeOllama(ThreadedUpstream):
    name = "fake-ollama"
    base_path = ""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Recorded] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/chat", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Recorded(request.path_qs, dict(request.headers), body))
        scenario = str(body.get("model", ""))
        if scenario == "fail-500":
            return web.json_response({"error": "llama runner process has terminated"}, status=500)
        if scenario == "fail-429":
            return web.json_response({"error": "too many requests"}, status=429)
        if body.get("stream", True) is False:
            return web.json_response(unary(scenario))
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        if scenario == "error-before":
            await response.write(ndjson({"error": ERROR}))
            return response
        if scenario == "error-mid":
            await response.write(ndjson(lines("text")[0]))
            await asyncio.sleep(0.05)
            await response.write(ndjson({"error": ERROR}))
            return response
        blob = b"".join(ndjson(obj) for obj in lines(scenario))
        # cut at odd places, as real networks deliver it
        for start in range(0, len(blob), 47):
            await response.write(blob[start : start + 47])
        return response
