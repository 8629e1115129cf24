"""A fake upstream that breaks an answer at a chosen byte and continues one from a prefill:
Anthropic Messages (`/v1/messages`, base URL `anthropic_url`) and OpenAI Chat Completions
(`/v1/chat/completions`, base URL `openai_url`; the continuation of vLLM's
`continue_final_message` and DeepSeek/Mistral's `"prefix": true`), in each API's exact wire
format, with the text as UTF-8 on the wire (so a cut can fall inside a character).

Every answer is ANSWER, or the rest of it after the answer's start a request carries:
- Anthropic: a last `assistant` message is a prefill; one ending in whitespace is refused
  with Anthropic's 400, and one that is not a start of ANSWER with a 400 saying so.
- OpenAI: a last `assistant` message is continued with `continue_final_message: true` (and
  `add_generation_prompt: false`) or `"prefix": true` on it; without either, the server
  starts a new message (the whole ANSWER, as a real server would), which a gateway that
  forgot the flag shows as a doubled answer.

The upstream model id says what the answer does:
  answer                 the answer (or its rest) whole
  reject-prefill         a 400 for any request ending in an assistant turn, else `answer`
  fail-500               a 500 (the provider's error body), always
  break-<how>-<byte>     the answer's stream up to byte <byte> of its body, then <how>:
                         reset (RST), stall (silence until the client hangs up), truncated
                         (a clean end), error (the provider's overloaded error event after
                         the last whole event), badjson (a data line that is not JSON
                         after the last whole event)
Every request is recorded (`seen`: model, body).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from aiohttp import web

from tests.upstreams.faulty_upstream import reset_connection
from tests.upstreams.threaded import ThreadedUpstream

# words split inside (pieces of 7 characters), pieces that end in a space, and multi-byte
# characters of two, three and four bytes
ANSWER = (
    "Grüße aus Köln — the answer is forty-two. 東京 and Zürich agree; naïve café "
    "owners 🍰 say so too, and that is the whole story, told once."
)
PIECE = 7
HOLD_S = 30.0
_EMPTY_TEXT = {"type": "text", "text": ""}
INPUT_TOKENS = 30


def pieces(text: str, size: int = PIECE) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def dumps(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def anthropic_events(text: str, model: str, prompt_tokens: int, size: int = PIECE) -> list[bytes]:
    def event(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {dumps(data)}\n\n".encode()

    message = {
        "id": "msg_cont",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": prompt_tokens, "output_tokens": 1},
    }
    parts = pieces(text, size)
    out = [
        event("message_start", {"type": "message_start", "message": message}),
        event(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": _EMPTY_TEXT},
        ),
    ]
    for part in parts:
        delta = {"type": "content_block_delta", "index": 0}
        out.append(
            event("content_block_delta", {**delta, "delta": {"type": "text_delta", "text": part}})
        )
    out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    out.append(
        event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": len(parts)},
            },
        )
    )
    out.append(event("message_stop", {"type": "message_stop"}))
    return out


def openai_events(text: str, model: str, prompt_tokens: int, size: int = PIECE) -> list[bytes]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        body = {
            "id": "chatcmpl-cont",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }
        return f"data: {dumps(body)}\n\n".encode()

    parts = pieces(text, size)
    out = [chunk({"role": "assistant", "content": ""})]
    out += [chunk({"content": part}) for part in parts]
    out.append(chunk({}, "stop"))
    usage = {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": len(parts),
        "total_tokens": prompt_tokens + len(parts),
    }
    body = {
        "id": "chatcmpl-cont",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": model,
        "choices": [],
        "usage": usage,
    }
    out.append(f"data: {dumps(body)}\n\n".encode())
    out.append(b"data: [DONE]\n\n")
    return out


ERROR_EVENTS = {
    "anthropic": b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
    b'"message": "Overloaded"}}\n\n',
    "openai": b'data: {"error": {"message": "The server is overloaded", "type": "server_error", '
    b'"code": "server_error"}}\n\n',
}


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


class ContinuingUpstream(ThreadedUpstream):
    name = "continuing-upstream"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, dict[str, Any]]] = []

    @property
    def anthropic_url(self) -> str:
        return self.base_url

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/chat/completions", self._chat)

    def prefills(self) -> list[str | None]:
        """The answer's start each request carried (None: it carried none)."""
        out: list[str | None] = []
        for _, body in self.seen:
            last = body["messages"][-1]
            out.append(_text_of(last.get("content")) if last["role"] == "assistant" else None)
        return out

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append((body["model"], body))
        last = body["messages"][-1]
        start = _text_of(last["content"]) if last["role"] == "assistant" else ""
        model = body["model"]
        if model == "fail-500":
            return _anthropic_error(500, "Internal server error", "api_error")
        if last["role"] == "assistant":
            if model == "reject-prefill":
                return _anthropic_error(400, "This model does not support assistant prefill.")
            if start != start.rstrip():
                return _anthropic_error(
                    400, "messages: final assistant content cannot end with trailing whitespace"
                )
        if not ANSWER.startswith(start):
            return _anthropic_error(400, f"prefill is not the answer's start: {start!r}")
        prompt = INPUT_TOKENS + len(start) // 4
        events = anthropic_events(ANSWER[len(start) :], model, prompt)
        return await self._answer(request, model, events, "anthropic")

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.seen.append((body["model"], body))
        model = body["model"]
        last = body["messages"][-1]
        start = ""
        if last["role"] == "assistant":
            if model == "reject-prefill":
                return _openai_error("assistant prefill is not supported")
            continues = body.get("continue_final_message") is True and (
                body.get("add_generation_prompt") is False
            )
            if continues or last.get("prefix") is True:
                start = _text_of(last["content"])
        if not ANSWER.startswith(start):
            return _openai_error(f"not the answer's start: {start!r}")
        prompt = INPUT_TOKENS + len(start) // 4
        events = openai_events(ANSWER[len(start) :], model, prompt)
        return await self._answer(request, model, events, "openai")

    async def _answer(
        self, request: web.Request, model: str, events: list[bytes], api: str
    ) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        blob = b"".join(events)
        if not model.startswith("break-"):
            await _send(response, blob)
            return response
        _, how, at = model.split("-")
        cut = int(at)
        if how in ("error", "badjson"):
            whole, end = b"", 0
            for event in events:
                if end + len(event) > cut:
                    break
                end += len(event)
            whole = blob[:end]
            tail = ERROR_EVENTS[api] if how == "error" else b"data: {not json\n\n"
            await _send(response, whole)
            await asyncio.sleep(0.05)  # the gateway passes what it has on first
            await _send(response, tail)
            return response
        await _send(response, blob[:cut])
        await asyncio.sleep(0.05)  # the gateway passes what it has on first
        if how == "reset":
            return await reset_connection(request)
        if how == "stall":
            await asyncio.sleep(HOLD_S)
        return response  # truncated: a clean end


def _openai_error(message: str) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error"}}
    return web.json_response(body, status=400)


def _anthropic_error(
    status: int, message: str, kind: str = "invalid_request_error"
) -> web.Response:
    body = {"type": "error", "error": {"type": kind, "message": message}}
    return web.json_response(body, status=status)


async def _send(response: web.StreamResponse, blob: bytes) -> None:
    try:
        for start in range(0, len(blob), 97):  # pieces that cut events and characters
            await response.write(blob[start : start + 97])
    except ConnectionResetError:
        return
