"""A fake model server whose models take no tools and answer in prose, for tool emulation.

It speaks two wire formats over the same replies: Ollama's native `/api/chat` (NDJSON) and
the OpenAI-compatible `/v1/chat/completions` (SSE). A request that carries `tools` is refused
with HTTP 400 as such servers do ("... does not support tools"), so a test passes only if the
gateway took the tools out. The model name picks the reply; it is streamed in fragments of
FRAGMENT characters, so envelopes arrive split at arbitrary places.

  prose      a plain answer, no call
  inline     a sentence, then a bare envelope in the text
  fenced     a sentence, then the envelope in a ```json fence, then a closing remark
  two-calls  one envelope holding two calls
  unknown    an envelope naming a tool that is not in the request
  echo       repeats the system prompt and the last message (to see what the model got)
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream

WEATHER_ARGS = {"city": "Paris", "unit": "celsius"}
USER_ARGS = {"user_id": "u-42"}
REPLIES = {
    "prose": "Paris is sunny today, {roughly} 21 degrees.",
    "inline": 'Let me look that up. {"tool_calls": [{"name": "get_weather", "arguments": '
    + json.dumps(WEATHER_ARGS)
    + "}]}",
    "fenced": "I will check.\n\n```json\n"
    + json.dumps({"tool_calls": [{"name": "get_weather", "arguments": WEATHER_ARGS}]}, indent=2)
    + "\n```\n",
    "two-calls": json.dumps(
        {
            "tool_calls": [
                {"name": "get_weather", "arguments": WEATHER_ARGS},
                {"name": "get_user", "arguments": USER_ARGS},
            ]
        }
    ),
    "unknown": 'Calling: {"tool_calls": [{"name": "launch_rocket", "arguments": {}}]}',
}
FRAGMENT = 4
PROMPT_TOKENS = 57


class Recorded:
    def __init__(self, path: str, body: dict[str, Any]) -> None:
        self.path = path
        self.body = body


class FakeProseModel(ThreadedUpstream):
    name = "fake-prose-model"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Recorded] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/api/chat", self._ollama)
        app.router.add_post("/v1/chat/completions", self._openai)

    def _reply(self, body: dict[str, Any]) -> str:
        model = str(body.get("model", "prose"))
        if model == "echo":
            messages = body.get("messages") or [{}]
            first, last = messages[0], messages[-1]
            return f"SYSTEM[{first.get('content')}] LAST[{last.get('role')}:{last.get('content')}]"
        return REPLIES[model]

    async def _refuse_tools(self, request: web.Request, body: dict[str, Any]) -> web.Response:
        message = f"registry.ollama.ai/library/{body.get('model')} does not support tools"
        return web.json_response({"error": message}, status=400)

    async def _ollama(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Recorded(request.path, body))
        if body.get("tools"):
            return await self._refuse_tools(request, body)
        reply = self._reply(body)
        model = body.get("model")
        final = {
            "model": model,
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": PROMPT_TOKENS,
            "eval_count": len(reply) // FRAGMENT,
        }
        if body.get("stream") is False:
            final["message"]["content"] = reply
            return web.json_response(final)
        response = web.StreamResponse(headers={"Content-Type": "application/x-ndjson"})
        await response.prepare(request)
        for part in _fragments(reply):
            line = {
                "model": model,
                "message": {"role": "assistant", "content": part},
                "done": False,
            }
            await response.write(json.dumps(line).encode() + b"\n")
        await response.write(json.dumps(final).encode() + b"\n")
        await response.write_eof()
        return response

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Recorded(request.path, body))
        if body.get("tools"):
            message = f"{body.get('model')} does not support tools"
            error = {"message": message, "type": "invalid_request_error", "param": "tools"}
            return web.json_response({"error": error}, status=400)
        reply = self._reply(body)
        usage = {
            "prompt_tokens": PROMPT_TOKENS,
            "completion_tokens": len(reply) // FRAGMENT,
            "total_tokens": PROMPT_TOKENS + len(reply) // FRAGMENT,
        }
        base = {"id": "chatcmpl-prose", "created": 1764489600, "model": body.get("model")}
        if not body.get("stream"):
            message = {"role": "assistant", "content": reply}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            completion = {**base, "object": "chat.completion", "choices": [choice]}
            return web.json_response({**completion, "usage": usage})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)

        async def send(choices: list[Any], **extra: Any) -> None:
            chunk = {**base, "object": "chat.completion.chunk", "choices": choices, **extra}
            await response.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")

        await send([{"index": 0, "delta": {"role": "assistant", "content": ""}}])
        for part in _fragments(reply):
            await send([{"index": 0, "delta": {"content": part}, "finish_reason": None}])
        await send([{"index": 0, "delta": {}, "finish_reason": "stop"}])
        options = body.get("stream_options") or {}
        if options.get("include_usage"):
            await send([], usage=usage)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response


def _fragments(text: str) -> list[str]:
    return [text[i : i + FRAGMENT] for i in range(0, len(text), FRAGMENT)]
