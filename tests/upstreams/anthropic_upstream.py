"""A fake Anthropic Messages upstream that speaks the exact wire format (`event:` lines,
`message_start` ... `message_stop`, `ping`s, Anthropic error bodies).

The upstream model name picks the scenario (`"model": "claude/<scenario>"` at the gateway):

  text            a text block, finish end_turn
  two-tools       a text block, then two tool_use blocks (block indexes 1 and 2)
  tools-only      the two tool_use blocks of two-tools and no text (block indexes 0 and 1)
  no-args         a text block, then a tool_use whose only partial_json is ""
  server-tool     a server_tool_use block (not a client call), then text
  thinking-tool   a thinking block (thinking_delta, then signature_delta), then a tool_use
                  (the shape of a thinking model's tool turn); non-streaming too
  error-before    `event: error` (overloaded_error) as the first event of a 200 stream
  error-after     text first, then `event: error`
  fail-529 / fail-429 / fail-400   an HTTP error with an Anthropic error body

`POST /v1/messages/count_tokens` answers `{"input_tokens": count_of(body)}` (a stand-in
count that changes with the messages, so a test can tell it was forwarded); a
`fail-<status>` model gets that error there too, and `slow` waits 5 s before answering.

A key starting with `sk-bad` gets a 401. Every request is recorded (headers, JSON body and
the body's bytes).
It runs on its own thread and loop so that tests can use synchronous clients.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream

TEXT_PIECES = ["Let me ", "check ", "that."]
TOOL_ARGS = [
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("get_time", {"timezone": "Europe/Paris"}),
]
USAGE_IN = {"input_tokens": 40, "cache_read_input_tokens": 8, "cache_creation_input_tokens": 2}
OUTPUT_TOKENS = 21
THINKING_PIECES = ["The user wants ", "the weather."]
SIGNATURE = "EqQBCkgIARABGAIiQL2fake+signature/of=the+thinking"
ERROR_KINDS = {
    529: "overloaded_error",
    429: "rate_limit_error",
    400: "invalid_request_error",
    401: "authentication_error",
}


def event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_KINDS.get(status, "api_error")
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}


def count_of(body: dict[str, Any]) -> int:
    return 3 + len(json.dumps(body.get("messages"))) // 4


class Recorded:
    def __init__(self, headers: dict[str, str], body: dict[str, Any], raw: bytes = b"") -> None:
        self.headers = headers
        self.body = body
        self.raw = raw


class Stream:
    """Builds one message's events, block by block."""

    def __init__(self, model: str) -> None:
        self.events: list[bytes] = []
        self.index = 0
        self.model = model

    def start(self) -> Stream:
        message = {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**USAGE_IN, "output_tokens": 1},
        }
        self.events.append(event("message_start", {"type": "message_start", "message": message}))
        self.events.append(event("ping", {"type": "ping"}))
        return self

    def block(self, content: dict[str, Any], deltas: list[dict[str, Any]]) -> Stream:
        i = self.index
        self.index += 1
        self.events.append(
            event(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": content},
            )
        )
        for d in deltas:
            self.events.append(
                event(
                    "content_block_delta", {"type": "content_block_delta", "index": i, "delta": d}
                )
            )
        self.events.append(event("content_block_stop", {"type": "content_block_stop", "index": i}))
        return self

    def text(self) -> Stream:
        deltas = [{"type": "text_delta", "text": p} for p in TEXT_PIECES]
        return self.block({"type": "text", "text": ""}, deltas)

    def tool(self, kind: str, tool_id: str, name: str, args: str) -> Stream:
        pieces = [args[i : i + 6] for i in range(0, len(args), 6)]
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *pieces]]
        return self.block({"type": kind, "id": tool_id, "name": name, "input": {}}, deltas)

    def thinking(self) -> Stream:
        deltas: list[dict[str, Any]] = [
            {"type": "thinking_delta", "thinking": p} for p in THINKING_PIECES
        ]
        deltas.append({"type": "signature_delta", "signature": SIGNATURE})
        return self.block({"type": "thinking", "thinking": "", "signature": ""}, deltas)

    def end(self, stop_reason: str) -> list[bytes]:
        self.events.append(
            event(
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop_reason, "stop_sequence": None},
                    "usage": {"output_tokens": OUTPUT_TOKENS},
                },
            )
        )
        self.events.append(event("message_stop", {"type": "message_stop"}))
        return self.events


def scenario_events(scenario: str, model: str) -> list[bytes]:
    s = Stream(model).start()
    if scenario in ("two-tools", "tools-only"):
        if scenario == "two-tools":
            s.text()
        for i, (name, args) in enumerate(TOOL_ARGS):
            s.tool("tool_use", f"toolu_fake_{i}", name, json.dumps(args))
        return s.end("tool_use")
    if scenario == "no-args":
        return s.text().tool("tool_use", "toolu_noargs", "now", "").end("tool_use")
    if scenario == "thinking-tool":
        name, args = TOOL_ARGS[0]
        s.thinking().tool("tool_use", "toolu_think_0", name, json.dumps(args))
        return s.end("tool_use")
    if scenario == "server-tool":
        s.tool("server_tool_use", "srvtoolu_1", "web_search", '{"query": "x"}')
        return s.text().end("end_turn")
    return s.text().end("end_turn")


class FakeAnthropic(ThreadedUpstream):
    name = "fake-anthropic"
    base_path = ""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Recorded] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.requests.append(Recorded(dict(request.headers), body))
        model = body.get("model", "")
        if model.startswith("fail-"):
            status = int(model.removeprefix("fail-"))
            return web.json_response(error_body(status, f"scenario {model}"), status=status)
        if model == "slow":
            await asyncio.sleep(5)  # longer than any test's total_s
        return web.json_response({"input_tokens": count_of(body)})

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        body = json.loads(raw)
        self.requests.append(Recorded(dict(request.headers), body, raw))
        scenario = body.get("model", "text")
        if request.headers.get("x-api-key", "").startswith("sk-bad"):
            return web.json_response(error_body(401, "invalid x-api-key"), status=401)
        if scenario.startswith("fail-"):
            status = int(scenario.removeprefix("fail-"))
            return web.json_response(error_body(status, f"scenario {scenario}"), status=status)
        if not body.get("stream"):
            return web.json_response(self._message(scenario))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        overloaded = event(
            "error",
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
        )
        if scenario == "error-before":
            await response.write(overloaded)
            return response
        events = scenario_events(scenario, "claude-fake-1")
        if scenario == "error-after":
            await response.write(b"".join(events[:5]))
            await asyncio.sleep(0.05)
            await response.write(overloaded)
            return response
        blob = b"".join(events)
        for start in range(0, len(blob), 97):  # cut at odd places, as networks deliver them
            await response.write(blob[start : start + 97])
        return response

    def _message(self, scenario: str) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": "".join(TEXT_PIECES)}]
        stop = "end_turn"
        if scenario == "thinking-tool":
            name, args = TOOL_ARGS[0]
            thinking = "".join(THINKING_PIECES)
            content = [
                {"type": "thinking", "thinking": thinking, "signature": SIGNATURE},
                {"type": "tool_use", "id": "toolu_think_0", "name": name, "input": args},
            ]
            stop = "tool_use"
        if scenario == "two-tools":
            content += [
                {"type": "tool_use", "id": f"toolu_fake_{i}", "name": name, "input": args}
                for i, (name, args) in enumerate(TOOL_ARGS)
            ]
            stop = "tool_use"
        return {
            "id": "msg_fake_unary",
            "type": "message",
            "role": "assistant",
            "model": "claude-fake-1",
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {**USAGE_IN, "output_tokens": OUTPUT_TOKENS},
        }
