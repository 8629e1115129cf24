"""A fake OpenAI Responses API upstream (`POST /responses`) speaking the exact wire format of
the recordings in tests/wire_fixtures (openai_responses_*.sse): every frame is
`event: <type>\\ndata: <json with the same type>\\n\\n`, `sequence_number` counts from 0 with
`response.created`, there is no `[DONE]`, `function_call` items have an `fc_...` item id
distinct from their `call_...` call id, and argument deltas name their item by `item_id`.

Routes: `POST /v1/responses` (OpenAI: `Authorization: Bearer`), and Azure's
`POST /openai/v1/responses` and `POST /openai/responses?api-version=...` (`api-key` header;
the dated path without `api-version` gets Azure's 404). Every request is recorded in
`calls` with its path, query, headers and JSON body. A key starting with `sk-bad` gets a
401.

The body's `model` picks the scenario (so `"model": "up/<scenario>"` through a gateway):

  text                two content deltas' worth of text in one message item
  parallel-2          two function_call items (search_documents, get_user) whose argument
                      deltas interleave: item 0, item 1, item 0, ...
  text-then-call      a message item, then a get_weather function_call (output_index 1)
  reasoning-then-call a reasoning item with summary deltas, then a get_weather call
  failed              `response.created`, `.in_progress`, then `response.failed`
                      (code server_error) before any output
  incomplete          text, then `response.incomplete` (reason max_output_tokens)
  error-after         text deltas, then, 0.3 s later (the gateway has committed), an
                      `error` event (code server_error)
  fail-500 / fail-429 / fail-400   an HTTP error with an OpenAI error body

Non-streaming requests get the response object that `response.completed` (or
`.incomplete` / `.failed`) carries in the stream; `error-after` gets an HTTP 500.
Usage is always reported (`USAGE`), as the Responses API does.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.upstreams.openai_upstream import EXPECTED_ARGS
from tests.upstreams.openai_upstream import TEXT_PIECES
from tests.upstreams.openai_upstream import fragments
from tests.upstreams.threaded import ThreadedUpstream

MODEL = "gpt-5-fake-2025-08-07"
RESPONSE_ID = "resp_fake0123456789"
CREATED_AT = 1758034836
USAGE = {
    "input_tokens": 53,
    "input_tokens_details": {"cache_write_tokens": 0, "cached_tokens": 11},
    "output_tokens": 69,
    "output_tokens_details": {"reasoning_tokens": 26},
    "total_tokens": 122,
}
TEXT = "".join(TEXT_PIECES)
REASONING_PIECES = ["The user wants ", "the weather."]
PARALLEL = ["search_documents", "get_user"]


def call_id(name: str) -> str:
    return f"call_{name}_x7"


class Recorded:
    def __init__(
        self, path: str, query: dict[str, str], headers: dict[str, str], body: dict[str, Any]
    ) -> None:
        self.path = path
        self.query = query
        self.headers = headers
        self.body = body


class Script:
    """Builds one scenario's events, and the response object they describe."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.output: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        # a snapshot: items are updated in place as the script goes on
        fields = json.loads(json.dumps(fields))
        self.events.append({"type": kind, **fields, "sequence_number": len(self.events)})

    def response(self, status: str, **extra: Any) -> dict[str, Any]:
        done = status != "in_progress"
        return {
            "id": RESPONSE_ID,
            "object": "response",
            "created_at": CREATED_AT,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "model": MODEL,
            "output": list(self.output) if done else [],
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": "low", "summary": None},
            "service_tier": "default",
            "store": False,
            "temperature": 1.0,
            "text": {"format": {"type": "text"}, "verbosity": "medium"},
            "tool_choice": "auto",
            "tools": [],
            "top_p": 1.0,
            "truncation": "disabled",
            "usage": USAGE if done else None,
            "user": None,
            "metadata": {},
            **extra,
        }

    def start(self) -> None:
        self.emit("response.created", response=self.response("in_progress"))
        self.emit("response.in_progress", response=self.response("in_progress"))

    def message(self, pieces: list[str], *, finish: bool = True) -> None:
        index, item_id = len(self.output), f"msg_fake{len(self.output)}"
        item = {
            "id": item_id,
            "type": "message",
            "status": "in_progress",
            "content": [],
            "role": "assistant",
        }
        self.emit("response.output_item.added", item=item, output_index=index)
        part = {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}
        at = {"item_id": item_id, "output_index": index, "content_index": 0}
        self.emit("response.content_part.added", **at, part=part)
        for piece in pieces:
            self.emit("response.output_text.delta", **at, delta=piece, logprobs=[])
        text = "".join(pieces)
        done_part = {**part, "text": text}
        status = "completed" if finish else "incomplete"
        done_item = {**item, "status": status, "content": [done_part]}
        self.output.append(done_item)
        if not finish:
            return
        self.emit("response.output_text.done", **at, text=text, logprobs=[])
        self.emit("response.content_part.done", **at, part=done_part)
        self.emit("response.output_item.done", item=done_item, output_index=index)

    def reasoning(self, pieces: list[str]) -> None:
        index, item_id = len(self.output), f"rs_fake{len(self.output)}"
        item = {"id": item_id, "type": "reasoning", "summary": [], "encrypted_content": "gAAA"}
        self.emit("response.output_item.added", item=item, output_index=index)
        at = {"item_id": item_id, "output_index": index, "summary_index": 0}
        part = {"type": "summary_text", "text": ""}
        self.emit("response.reasoning_summary_part.added", **at, part=part)
        for piece in pieces:
            self.emit("response.reasoning_summary_text.delta", **at, delta=piece)
        text = "".join(pieces)
        self.emit("response.reasoning_summary_text.done", **at, text=text)
        self.emit("response.reasoning_summary_part.done", **at, part={**part, "text": text})
        done_item = {**item, "summary": [{"type": "summary_text", "text": text}]}
        self.output.append(done_item)
        self.emit("response.output_item.done", item=done_item, output_index=index)

    def calls(self, names: list[str]) -> None:
        """Function calls, all started before any arguments; argument deltas round robin."""
        started = []
        for name in names:
            index, item_id = len(self.output), f"fc_fake{len(self.output)}"
            item = {
                "id": item_id,
                "type": "function_call",
                "status": "in_progress",
                "arguments": "",
                "call_id": call_id(name),
                "name": name,
            }
            self.output.append(item)
            self.emit("response.output_item.added", item=item, output_index=index)
            started.append((index, item, fragments(json.dumps(EXPECTED_ARGS[name]), 5)))
        for step in range(max(len(parts) for _, _, parts in started)):
            for index, item, parts in started:
                if step < len(parts):
                    self.emit(
                        "response.function_call_arguments.delta",
                        delta=parts[step],
                        item_id=item["id"],
                        obfuscation="Qx9",
                        output_index=index,
                    )
        for index, item, parts in started:
            arguments = "".join(parts)
            self.emit(
                "response.function_call_arguments.done",
                arguments=arguments,
                item_id=item["id"],
                output_index=index,
            )
            item.update(status="completed", arguments=arguments)
            self.emit("response.output_item.done", item=item, output_index=index)

    def completed(self) -> None:
        self.emit("response.completed", response=self.response("completed"))


def script(scenario: str) -> Script:
    s = Script()
    s.start()
    if scenario == "text":
        s.message(TEXT_PIECES)
    elif scenario == "parallel-2":
        s.calls(PARALLEL)
    elif scenario == "text-then-call":
        s.message(TEXT_PIECES)
        s.calls(["get_weather"])
    elif scenario == "reasoning-then-call":
        s.reasoning(REASONING_PIECES)
        s.calls(["get_weather"])
    elif scenario == "failed":
        error = {"code": "server_error", "message": "The model failed to respond."}
        s.emit("response.failed", response=s.response("failed", error=error, usage=None))
        return s
    elif scenario == "incomplete":
        s.message(TEXT_PIECES[:2], finish=False)
        details = {"reason": "max_output_tokens"}
        s.emit("response.incomplete", response=s.response("incomplete", incomplete_details=details))
        return s
    elif scenario == "error-after":
        s.message(TEXT_PIECES[:3], finish=False)
        s.emit("error", code="server_error", message="The server had an error.", param=None)
        return s
    else:
        raise web.HTTPNotFound(text=f"no scenario {scenario!r}")
    s.completed()
    return s


def sse(event: dict[str, Any]) -> bytes:
    data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    return f"event: {event['type']}\ndata: {data}\n\n".encode()


def error_body(status: int, message: str, code: str | None) -> dict[str, Any]:
    kind = "server_error" if status >= 500 else "invalid_request_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


class FakeResponses(ThreadedUpstream):
    name = "fake-openai-responses"
    base_path = "/v1"

    def __init__(self, azure_key: str = "az-key") -> None:
        super().__init__()
        self.azure_key = azure_key
        self.calls: list[Recorded] = []

    @property
    def root_url(self) -> str:
        """The URL without the OpenAI `/v1` (an Azure resource's base URL)."""
        return f"http://127.0.0.1:{self.port}"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/responses", self._openai)
        app.router.add_post("/openai/v1/responses", self._azure)
        app.router.add_post("/openai/responses", self._azure)

    async def _record(self, request: web.Request) -> dict[str, Any]:
        body: dict[str, Any] = await request.json()
        self.calls.append(Recorded(request.path, dict(request.query), dict(request.headers), body))
        return body

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if request.headers.get("Authorization", "").startswith("Bearer sk-bad"):
            err = error_body(401, "Incorrect API key provided: sk-bad***1.", "invalid_api_key")
            return web.json_response(err, status=401)
        return await self._serve(request, body)

    async def _azure(self, request: web.Request) -> web.StreamResponse:
        body = await self._record(request)
        if request.headers.get("api-key") != self.azure_key:
            err = {"error": {"code": "401", "message": "Access denied due to invalid key."}}
            return web.json_response(err, status=401)
        if request.path == "/openai/responses" and "api-version" not in request.query:
            err = {"error": {"code": "404", "message": "Resource not found"}}
            return web.json_response(err, status=404)
        return await self._serve(request, body)

    async def _serve(self, request: web.Request, body: dict[str, Any]) -> web.StreamResponse:
        scenario = str(body.get("model", "text"))
        if scenario.startswith("fail-"):
            status = int(scenario.removeprefix("fail-"))
            err = error_body(status, f"scenario {scenario}", f"code_{status}")
            return web.json_response(err, status=status)
        s = script(scenario)
        if not body.get("stream"):
            if scenario == "error-after":
                err = error_body(500, "The server had an error.", "server_error")
                return web.json_response(err, status=500)
            return web.json_response(s.events[-1]["response"])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        events = s.events
        if scenario == "error-after":
            # the text leaves in reads of its own, so the gateway commits before the error
            await self._write(response, b"".join(sse(e) for e in events[:-1]))
            await asyncio.sleep(0.3)
            events = events[-1:]
        await self._write(response, b"".join(sse(e) for e in events))
        return response

    @staticmethod
    async def _write(response: web.StreamResponse, blob: bytes) -> None:
        for start in range(0, len(blob), 97):  # cut at odd places, as networks deliver
            await response.write(blob[start : start + 97])
