"""A fake OpenAI Chat Completions upstream that speaks the exact wire format.

The upstream model name picks the scenario, so a gateway configured with this server as
provider `up` is driven with `"model": "up/<scenario>"`:

  text                 a few content deltas, finish "stop"
  interleaved-2        two parallel tool calls whose argument deltas alternate 0,1,0,1
  interleaved-2-swap   two calls, argument deltas in the order 0,1,1,0,...
  interleaved-3        three parallel tool calls, round robin
  text-then-call       content deltas, then one tool call (get_weather), finish "tool_calls"
  no-args              one call to `now` whose arguments arrive as "" then "{}"
  fail-500 / fail-429 / fail-400   an HTTP error with an OpenAI error body
  error-before         a 200 stream whose first event is `data: {"error": ...}`
  error-after          content first, then an error event
  error-mixed          content, then more content and an error event in one write
  truncated            content, then the connection closes without finish or [DONE]
  slow                 one content delta every 50 ms, 400 of them (for disconnect tests)
  silent               headers, then nothing (for timeouts)
  reuse-index          two calls that both say index 0 (distinct ids): a broken server
  think                the role chunk, 1 s of silence, then the text (commit point, keep-alive)
  compat-quirks        reasoning_content, usage on every chunk, a call whose id and name
                       repeat on every delta and that has no index (OpenAI-compatible servers)
  hold                 1 s before anything, headers included (a gateway upstream), then text
  whole                the text stream in one write with its end (Content-Length, not chunked)
  stall                content, then silence (idle timeout after the commit point)
  calls-said-stop      (non-streaming) one tool call with `finish_reason: "stop"`, as some
                       OpenAI-compatible servers answer

A key starting with `sk-bad` gets a 401, whatever the scenario; a key `sk-rl-<n>` gets a 429
with `Retry-After: <n>`.

Every request is recorded (headers and JSON body); `closed` counts streams whose client
(the gateway) went away before the end. It runs on its own thread and loop so that tests
can use synchronous clients.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

from aiohttp import web

from tests.upstreams.threaded import ThreadedUpstream

EXPECTED_ARGS = {
    "search_documents": {"query": "quarterly report", "limit": 5},
    "get_user": {"user_id": "u-42", "fields": ["name", "email"]},
    "get_weather": {"city": "Paris", "unit": "celsius"},
}
CALL_NAMES = list(EXPECTED_ARGS)
TEXT_PIECES = ["Hel", "lo", ", wor", "ld", "!"]


def fragments(text: str, size: int = 7) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


class Recorded:
    def __init__(self, headers: dict[str, str], body: dict[str, Any]) -> None:
        self.headers = headers
        self.body = body


class FakeOpenAI(ThreadedUpstream):
    name = "fake-openai"
    base_path = "/v1"

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Recorded] = []
        self.closed = 0
        self.finished = 0
        self.disconnected = threading.Event()

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    # --- the API -------------------------------------------------------------------------

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(Recorded(dict(request.headers), body))
        scenario = body.get("model", "text")
        if request.headers.get("Authorization", "").startswith("Bearer sk-bad"):
            return web.json_response(
                {
                    "error": {
                        "message": "Incorrect API key provided: sk-bad***1.",
                        "type": "invalid_request_error",
                        "param": None,
                        "code": "invalid_api_key",
                    }
                },
                status=401,
            )
        if request.headers.get("Authorization", "").startswith("Bearer sk-rl-"):
            wait = request.headers["Authorization"].removeprefix("Bearer sk-rl-")
            return web.json_response(
                {
                    "error": {
                        "message": "Rate limit reached",
                        "type": "requests",
                        "param": None,
                        "code": "rate_limit_exceeded",
                    }
                },
                status=429,
                headers={"Retry-After": wait},
            )
        if scenario.startswith("fail-"):
            status = int(scenario.removeprefix("fail-"))
            return web.json_response(
                {
                    "error": {
                        "message": f"scenario {scenario}",
                        "type": "server_error" if status >= 500 else "invalid_request_error",
                        "param": None,
                        "code": f"code_{status}",
                    }
                },
                status=status,
            )
        if scenario == "silent":
            await asyncio.sleep(3600)
        if not body.get("stream"):
            return web.json_response(self._completion(scenario))
        if scenario == "whole":  # one write: headers, every event, the end (Content-Length)
            usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
            whole = b"".join(self._events(scenario, usage_on))
            self.finished += 1
            return web.Response(body=whole, content_type="text/event-stream")
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        try:
            await self._stream(scenario, body, response)
        except (asyncio.CancelledError, ConnectionResetError):
            self.closed += 1
            self.disconnected.set()
            raise
        self.finished += 1
        return response

    def _chunk(
        self,
        delta: dict[str, Any] | None,
        finish: str | None = None,
        usage: dict[str, Any] | None = None,
        include_usage: bool = False,
    ) -> bytes:
        chunk: dict[str, Any] = {
            "id": "chatcmpl-fake",
            "object": "chat.completion.chunk",
            "created": 1754693439,
            "model": "fake-model-2025",
            "system_fingerprint": "fp_fake",
            "choices": []
            if delta is None
            else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }
        if include_usage:
            chunk["usage"] = usage
        chunk["obfuscation"] = "xyz"
        return b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + b"\n\n"

    def _quirks(self) -> list[bytes]:
        """How OpenAI-compatible servers deviate: reasoning_content deltas, cumulative usage
        on every chunk, one call whose id, type and name repeat on every delta and that has
        no index at all."""
        args = fragments(json.dumps(EXPECTED_ARGS["get_weather"]))
        out = []
        steps: list[dict[str, Any]] = [
            {"role": "assistant", "reasoning_content": "Let me "},
            {"reasoning_content": "think."},
            {"content": "Checking."},
        ]
        steps += [
            {
                "tool_calls": [
                    {
                        "id": "call_q",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": part},
                    }
                ]
            }
            for part in args
        ]
        for n, delta in enumerate(steps, 1):
            usage = {"prompt_tokens": 9, "completion_tokens": n, "total_tokens": 9 + n}
            out.append(self._chunk(delta, None, usage, include_usage=True))
        final = {"prompt_tokens": 9, "completion_tokens": 40, "total_tokens": 49}
        out.append(self._chunk({}, "stop", final, include_usage=True))
        out.append(b"data: [DONE]\n\n")
        return out

    def _events(self, scenario: str, usage_on: bool) -> list[bytes]:
        def c(
            delta: dict[str, Any] | None,
            finish: str | None = None,
            usage: dict[str, Any] | None = None,
        ) -> bytes:
            return self._chunk(delta, finish, usage, include_usage=usage_on)

        events = [c({"role": "assistant", "content": None})]
        finish = "stop"
        if scenario.startswith("interleaved") or scenario == "reuse-index":
            count = 3 if scenario == "interleaved-3" else 2
            names = CALL_NAMES[:count]
            parts = [fragments(json.dumps(EXPECTED_ARGS[n])) for n in names]
            for i, name in enumerate(names):
                index = 0 if scenario == "reuse-index" else i
                events.append(
                    c(
                        {
                            "tool_calls": [
                                {
                                    "index": index,
                                    "id": f"call_fake_{i}",
                                    "type": "function",
                                    "function": {"name": name, "arguments": ""},
                                }
                            ]
                        }
                    )
                )
            order = list(range(count))
            for step in range(max(len(p) for p in parts)):
                if scenario == "interleaved-2-swap" and step % 2:
                    order = order[::-1]
                for i in order:
                    if step < len(parts[i]):
                        delta = {"index": i, "function": {"arguments": parts[i][step]}}
                        if scenario == "reuse-index":
                            delta = {
                                "index": 0,
                                "id": f"call_fake_{i}",
                                "function": {"arguments": parts[i][step]},
                            }
                        events.append(c({"tool_calls": [delta]}))
                if scenario == "interleaved-2-swap" and step % 2:
                    order = order[::-1]
            finish = "tool_calls"
        elif scenario in ("text-then-call", "no-args"):
            if scenario == "text-then-call":
                events += [c({"content": p}) for p in TEXT_PIECES]
                name, pieces = "get_weather", fragments(json.dumps(EXPECTED_ARGS["get_weather"]))
            else:
                name, pieces = "now", ["{}"]
            start = {"index": 0, "id": f"call_{scenario}", "type": "function"}
            start["function"] = {"name": name, "arguments": ""}
            events.append(c({"tool_calls": [start]}))
            events += [
                c({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in pieces
            ]
            finish = "tool_calls"
        else:
            events += [c({"content": p}) for p in TEXT_PIECES]
        events.append(c({}, finish))
        if usage_on:
            events.append(
                c(
                    None,
                    usage={
                        "prompt_tokens": 11,
                        "completion_tokens": 7,
                        "total_tokens": 18,
                        "prompt_tokens_details": {"cached_tokens": 3, "audio_tokens": 0},
                        "completion_tokens_details": {"reasoning_tokens": 0},
                    },
                )
            )
        events.append(b"data: [DONE]\n\n")
        return events

    async def _stream(
        self, scenario: str, body: dict[str, Any], response: web.StreamResponse
    ) -> None:
        usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
        if scenario == "silent":
            await asyncio.sleep(3600)
        if scenario == "error-before":
            await response.write(
                b'data: {"error":{"message":"overloaded","type":"server_error",'
                b'"param":null,"code":"overloaded"}}\n\n'
            )
            return
        events = self._events(scenario, usage_on)
        if scenario == "slow":
            for i in range(400):
                await response.write(self._chunk({"content": f"t{i} "}))
                await asyncio.sleep(0.05)
            return
        if scenario == "compat-quirks":
            await response.write(b"".join(self._quirks()))
            return
        if scenario == "hold":  # headers held back too: aiohttp sends them with the 1st write
            await asyncio.sleep(1.0)
            await response.write(b"".join(events))
            return
        if scenario == "think":
            await response.write(events[0])
            await asyncio.sleep(1.0)
            await response.write(b"".join(events[1:]))
            return
        if scenario == "stall":
            await response.write(b"".join(events[:3]))
            await asyncio.sleep(3600)
        if scenario == "error-mixed":
            await response.write(b"".join(events[:3]))
            await asyncio.sleep(0.05)
            await response.write(
                events[3] + b'data: {"error":{"message":"model crashed",'
                b'"type":"server_error","param":null,"code":null}}\n\n'
            )
            return
        if scenario in ("error-after", "truncated"):
            await response.write(b"".join(events[:3]))
            await asyncio.sleep(0.05)
            if scenario == "error-after":
                await response.write(
                    b'data: {"error":{"message":"model crashed",'
                    b'"type":"server_error","param":null,"code":null}}\n\n'
                )
            return
        # Several events per write, cut at odd places, as real networks deliver them.
        blob = b"".join(events)
        for start in range(0, len(blob), 97):
            await response.write(blob[start : start + 97])

    def _completion(self, scenario: str) -> dict[str, Any]:
        if scenario == "calls-said-stop":
            return self._calls_said_stop()
        return {
            "id": "chatcmpl-fake-unary",
            "object": "chat.completion",
            "created": 1754693439,
            "model": "fake-model-2025",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": "".join(TEXT_PIECES),
                        "refusal": None,
                        "annotations": [],
                    },
                    "logprobs": None,
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
            "service_tier": "default",
        }

    def _calls_said_stop(self) -> dict[str, Any]:
        call = {
            "id": "call_said_stop",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
        }
        return {
            "id": "chatcmpl-fake-calls",
            "object": "chat.completion",
            "created": 1754693439,
            "model": "fake-model-2025",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
        }

    def wait_disconnect(self, timeout: float) -> float | None:
        start = time.monotonic()
        if self.disconnected.wait(timeout):
            return time.monotonic() - start
        return None
