"""A fake Bedrock runtime: `/model/{model}/converse-stream` answers AWS event-stream frames
(built with `encode_message`, each payload with a `p` padding field as the real service
sends), `/model/{model}/converse` answers Converse JSON.

The model id picks the scenario (a `:` suffix, as in `x-v1:0`, is allowed and ignored):

  text             text in three deltas, end_turn, metadata usage
  two-tools        text, then two toolUse blocks (contentBlockIndex 1 and 2), tool_use
  tools-only       the two toolUse blocks of two-tools (contentBlockIndex 0 and 1) and no
                   text, tool_use
  no-args          one toolUse block `now` whose only input delta is `""`, tool_use
  exception        two text deltas, then a `validationException` exception frame
                   mid-stream (not retryable)
  error-after      the frames of exception, with a 50 ms pause before the exception frame
                   (so the gateway has sent its first byte when the error comes)
  error-before     an `internalServerException` exception frame first, before any event
  fail-429         HTTP 429 with `x-amzn-errortype: ThrottlingException`
  fail-500         HTTP 500 with `x-amzn-errortype: InternalServerException`

Every request is recorded (raw path, headers with lowercased names, body).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from gateway.framing.aws_eventstream import encode_message
from tests.upstreams.threaded import ThreadedUpstream

TEXT_PIECES = ["Let me ", "check ", "that."]
TOOL_ARGS = [
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("get_time", {"timezone": "Europe/Paris"}),
]
USAGE = {"inputTokens": 40, "outputTokens": 21, "totalTokens": 61}


def frame(event_type: str, payload: dict[str, Any]) -> bytes:
    headers: dict[str, str | bytes | bool | int] = {
        ":event-type": event_type,
        ":content-type": "application/json",
        ":message-type": "event",
    }
    return encode_message(headers, json.dumps({**payload, "p": "abcdefgh"}).encode())


def exception_frame(kind: str, message: str) -> bytes:
    headers: dict[str, str | bytes | bool | int] = {
        ":exception-type": kind,
        ":content-type": "application/json",
        ":message-type": "exception",
    }
    return encode_message(headers, json.dumps({"message": message}).encode())


def text_frames(index: int = 0) -> list[bytes]:
    out = [
        frame("contentBlockDelta", {"contentBlockIndex": index, "delta": {"text": p}})
        for p in TEXT_PIECES
    ]
    return [*out, frame("contentBlockStop", {"contentBlockIndex": index})]


def tool_frames(index: int, tool_id: str, name: str, args: str) -> list[bytes]:
    start = {"toolUse": {"toolUseId": tool_id, "name": name}}
    out = [frame("contentBlockStart", {"contentBlockIndex": index, "start": start})]
    for i in range(0, len(args), 7):
        delta = {"toolUse": {"input": args[i : i + 7]}}
        out.append(frame("contentBlockDelta", {"contentBlockIndex": index, "delta": delta}))
    return [*out, frame("contentBlockStop", {"contentBlockIndex": index})]


def scenario_frames(scenario: str) -> list[bytes]:
    if scenario in ("tools-only", "no-args"):
        out = [frame("messageStart", {"role": "assistant"})]
        if scenario == "no-args":
            start = {"toolUse": {"toolUseId": "tooluse_fake_now", "name": "now"}}
            empty = {"toolUse": {"input": ""}}  # Claude's one delta for a call without arguments
            out += [
                frame("contentBlockStart", {"contentBlockIndex": 0, "start": start}),
                frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": empty}),
                frame("contentBlockStop", {"contentBlockIndex": 0}),
            ]
        else:
            for i, (name, args) in enumerate(TOOL_ARGS):
                out += tool_frames(i, f"tooluse_fake_{i}", name, json.dumps(args))
        out.append(frame("messageStop", {"stopReason": "tool_use"}))
        out.append(frame("metadata", {"usage": USAGE, "metrics": {"latencyMs": 12}}))
        return out
    out = [frame("messageStart", {"role": "assistant"}), *text_frames()]
    stop = "end_turn"
    if scenario == "two-tools":
        for i, (name, args) in enumerate(TOOL_ARGS):
            out += tool_frames(i + 1, f"tooluse_fake_{i}", name, json.dumps(args))
        stop = "tool_use"
    out.append(frame("messageStop", {"stopReason": stop}))
    out.append(frame("metadata", {"usage": USAGE, "metrics": {"latencyMs": 12}}))
    return out


class Recorded:
    def __init__(self, path: str, headers: dict[str, str], raw: bytes) -> None:
        self.path = path
        self.headers = headers  # names lowercased
        self.raw = raw
        self.body: dict[str, Any] = json.loads(raw)


class FakeBedrock(ThreadedUpstream):
    name = "fake-bedrock"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Recorded] = []

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/model/{model}/converse-stream", self._stream)
        app.router.add_post("/model/{model}/converse", self._unary)

    async def _record(self, request: web.Request) -> str | web.Response:
        raw = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        self.requests.append(Recorded(request.raw_path, headers, raw))
        scenario = request.match_info["model"].split(":", 1)[0]
        if scenario == "fail-429":
            return web.json_response(
                {"message": "Too many requests, please wait before trying again."},
                status=429,
                headers={"x-amzn-errortype": "ThrottlingException:http://internal.amazon.com/"},
            )
        if scenario == "fail-500":
            return web.json_response(
                {"message": "The server encountered an internal error."},
                status=500,
                headers={"x-amzn-errortype": "InternalServerException:http://internal.amazon.com/"},
            )
        return scenario

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        scenario = await self._record(request)
        if isinstance(scenario, web.Response):
            return scenario
        response = web.StreamResponse(
            headers={"Content-Type": "application/vnd.amazon.eventstream"}
        )
        await response.prepare(request)
        if scenario == "error-after":
            await response.write(b"".join(scenario_frames("text")[:3]))
            await asyncio.sleep(0.05)
            await response.write(exception_frame("validationException", "input is too long"))
            return response
        if scenario == "exception":
            frames = scenario_frames("text")[:3]
            frames.append(exception_frame("validationException", "input is too long"))
        elif scenario == "error-before":
            frames = [exception_frame("internalServerException", "the model is unavailable")]
        else:
            frames = scenario_frames(scenario)
        blob = b"".join(frames)
        for start in range(0, len(blob), 61):  # cut at odd places, as networks deliver them
            await response.write(blob[start : start + 61])
        return response

    async def _unary(self, request: web.Request) -> web.Response:
        scenario = await self._record(request)
        if isinstance(scenario, web.Response):
            return scenario
        content: list[dict[str, Any]] = [{"text": "".join(TEXT_PIECES)}]
        stop = "end_turn"
        if scenario == "tools-only":
            content = []
        elif scenario == "no-args":
            content = [{"toolUse": {"toolUseId": "tooluse_fake_now", "name": "now", "input": {}}}]
            stop = "tool_use"
        if scenario in ("two-tools", "tools-only"):
            content += [
                {"toolUse": {"toolUseId": f"tooluse_fake_{i}", "name": name, "input": args}}
                for i, (name, args) in enumerate(TOOL_ARGS)
            ]
            stop = "tool_use"
        return web.json_response(
            {
                "output": {"message": {"role": "assistant", "content": content}},
                "stopReason": stop,
                "usage": USAGE,
                "metrics": {"latencyMs": 12},
            }
        )
