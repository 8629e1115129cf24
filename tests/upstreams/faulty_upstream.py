"""A fake upstream that fails on command: OpenAI Chat Completions (`/v1/chat/completions`,
SDK base URL `openai_url`), Anthropic Messages (`/v1/messages`, base URL `anthropic_url`) and
Bedrock Converse (`/model/{modelId}/converse-stream` and `/converse`, base URL `bedrock_url`,
any SigV4 signature accepted) on one aiohttp server, each in its provider's exact wire format
(built in faulty_wire.py and faulty_bedrock.py).

What one answer does is its *mode*. The upstream model id names it (a gateway target
`{provider: oa, model: fail-500}` always fails; a Claude-style Bedrock id names it after
`anthropic.claude-`: `anthropic.claude-ok`, `us.anthropic.claude-stall`), unless a script
says otherwise:
`script(tag, modes)` (thread-safe) gives the requests whose messages contain `tag:<tag>` the
`modes` one per request, in order; once a script is used up the model's mode applies again.
Upstreams built with one `Scripts` share them.
Scripts keyed by the request, not by arrival order, make a chaos run reproducible from its
seed however its requests interleave.

  ok               the healthy answer: TEXT, and when the request has tools the two CALLS
                   (OpenAI: their argument deltas interleave 0,1,0,1; Anthropic: a text
                   block, then two tool_use blocks; Bedrock: a text block, then two toolUse
                   blocks whose input arrives in fragments, messageStop, metadata)
  fail-<status>    that HTTP status with the provider's error body (Bedrock: with its
                   `x-amzn-errortype`)
  rate-limit[-N]   429 with `Retry-After: N` (default 1) and a rate-limit error body;
                   `rate-limit-<N>ms` adds `retry-after-ms: N` (Retry-After rounded up);
                   Bedrock: a ThrottlingException 429, which names no wait
  reset-before     the connection is reset (RST) before any byte of the answer
  reset-mid        headers and some content, then the connection is reset
  slow-first-byte  SLOW_S of silence before the headers, then the healthy answer
  stall            headers and some content, then silence until the client hangs up
  overloaded       Anthropic: `event: error` (overloaded_error) right after message_start
                   (non-streaming: 529); OpenAI: the role chunk, then an error event
                   (non-streaming: 503); Bedrock: a serviceUnavailableException exception
                   frame right after messageStart (non-streaming: 503)
  exception        some content, then the provider's in-stream error: Bedrock a
                   throttlingException `:message-type: exception` frame, the others their
                   overloaded event (non-streaming: Bedrock 429, the others as overloaded)
  truncated        some content, then a clean end of the body: no finish, no [DONE]
                   (non-streaming: half the JSON, with a Content-Length that matches it)
  bad-json         some content, then a data line that is not JSON in place of the next
                   piece (non-streaming: a body that is not JSON)
  bad-json-first   the same, in place of the first piece: before any content
                   (Bedrock: a well-framed frame whose payload is cut inside its JSON)
  truncated-frame  some content, then the first half of the next event and a clean end of
                   the body: the connection closes mid-frame (non-streaming: as truncated)
  bad-crc          Bedrock: some content, then the next frame with a wrong message CRC;
                   APIs without checksums (SSE) stand it in as bad-json, and record that
  bad-crc-first    the same, in place of the first piece (stand-in: bad-json-first);
                   non-streaming, both are bad-json

"Some content" is the first two pieces of TEXT, so a gateway has committed by then. Every
request is recorded (`seen()`) with the mode it got.

A request may continue an answer from a prefill, as each provider does: its last message
is an assistant turn holding the answer's start (Anthropic Messages, and Bedrock Converse for
Anthropic's models, whose ids hold `anthropic.`; OpenAI chat only with vLLM's
`continue_final_message: true` and `add_generation_prompt: false`, or DeepSeek's
`"prefix": true` on the message). The answer (healthy, and the "some content" of the modes
above) is then the rest of TEXT after the prefill, in TEXT_PIECES cut where the prefill
ends, and the calls when the request has tools; "some content" is as much of the first two
pieces of that rest as there is (none when the prefill is all of TEXT: the mode then fails
before any content). The prefill is recorded (`Seen.prefill`, a refused one too). A prefill
that is not a start of TEXT, or one the provider refuses (Anthropic's and
Claude-on-Bedrock's ending in whitespace, any on a Bedrock model that is not Anthropic's,
vLLM's flags contradicting each other), is answered with the provider's 400 (mode
`refused-prefill`, no script consumed), so a gateway that continues an answer wrongly
shows. An OpenAI chat request whose last assistant message carries no flag gets a new
message, the whole TEXT, as a real server's.
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import struct
import threading
from collections import Counter
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tests.upstreams.faulty_bedrock import BEDROCK
from tests.upstreams.faulty_bedrock import bad_crc
from tests.upstreams.faulty_wire import ANTHROPIC
from tests.upstreams.faulty_wire import CALLS
from tests.upstreams.faulty_wire import OPENAI
from tests.upstreams.faulty_wire import TEXT
from tests.upstreams.faulty_wire import TEXT_PIECES
from tests.upstreams.faulty_wire import TOOLS
from tests.upstreams.faulty_wire import Api
from tests.upstreams.faulty_wire import BadPrefill
from tests.upstreams.faulty_wire import last_assistant
from tests.upstreams.faulty_wire import rest
from tests.upstreams.faulty_wire import text_of
from tests.upstreams.threaded import ThreadedUpstream

__all__ = ["CALLS", "TEXT", "TEXT_PIECES", "TOOLS", "FaultyUpstream", "Scripts", "Seen"]

FAILURES = (
    "fail-500",
    "rate-limit",
    "reset-before",
    "reset-mid",
    "slow-first-byte",
    "stall",
    "overloaded",
    "truncated",
    "bad-json",
    "bad-json-first",
    "exception",
    "truncated-frame",
    "bad-crc",
    "bad-crc-first",
)
# the modes that send "some content" first, then go wrong
AFTER_SOME_CONTENT = (
    "reset-mid",
    "stall",
    "truncated",
    "bad-json",
    "bad-crc",
    "exception",
    "truncated-frame",
)
SLOW_S = 1.5
HOLD_S = 30.0  # longest a stalled or reset answer waits for the client to hang up
CUT = 61  # write size: events arrive split at odd places, as networks deliver them
TAG = re.compile(r"tag:([A-Za-z0-9_.-]+)")
SIGV4_KEY = re.compile(r"Credential=([^/,]+)/")
# a Claude-style Bedrock model id (`anthropic.claude-ok`, `us.anthropic.claude-ok`): the
# mode follows the prefix, so a target can be one that continues answers and still say it
CLAUDE_ID = re.compile(r"^(?:[a-z]+\.)?anthropic\.claude-")
REFUSED_PREFILL = "refused-prefill"


@dataclass(frozen=True)
class Seen:
    """One request as the upstream saw it."""

    api: str  # "openai", "anthropic" or "bedrock"
    model: str
    mode: str
    tag: str | None
    key: str
    stream: bool
    tools: bool
    prefill: str | None = None  # the answer's start the request carried (or was refused)


class Scripts:
    """Per-request mode scripts; one instance may be shared by several upstreams, so a
    request's attempts take its modes in order whichever upstream each attempt reaches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._modes: dict[str, deque[str]] = {}

    def set(self, tag: str, modes: Sequence[str]) -> None:
        with self._lock:
            self._modes[tag] = deque(modes)

    def next(self, tag: str | None) -> str | None:
        """The next scripted mode of `tag`, None once its script is used up."""
        with self._lock:
            modes = self._modes.get(tag) if tag is not None else None
            return modes.popleft() if modes else None


class FaultyUpstream(ThreadedUpstream):
    name = "faulty-upstream"

    def __init__(self, scripts: Scripts | None = None) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self.scripts = scripts or Scripts()
        self._seen: list[Seen] = []

    @property
    def openai_url(self) -> str:
        return self.base_url + "/v1"

    @property
    def anthropic_url(self) -> str:
        return self.base_url

    @property
    def bedrock_url(self) -> str:
        return self.base_url

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._openai)
        app.router.add_post("/v1/messages", self._anthropic)
        app.router.add_post("/model/{model_id}/converse-stream", self._bedrock)
        app.router.add_post("/model/{model_id}/converse", self._bedrock)

    # --- commands, from any thread ----------------------------------------------------------

    def script(self, tag: str, modes: Sequence[str]) -> None:
        """Requests carrying `tag:<tag>` get `modes`, one each, before the model's mode."""
        self.scripts.set(tag, modes)

    def seen(self, tag: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self._seen if tag is None or s.tag == tag]

    def injected(self) -> Counter[str]:
        """How many answers of each mode were given."""
        with self._lock:
            return Counter(s.mode for s in self._seen)

    # --- the three APIs ---------------------------------------------------------------------

    async def _openai(self, request: web.Request) -> web.StreamResponse:
        key = request.headers.get("Authorization", "").removeprefix("Bearer ")
        return await self._answer(request, OPENAI, key)

    async def _anthropic(self, request: web.Request) -> web.StreamResponse:
        return await self._answer(request, ANTHROPIC, request.headers.get("x-api-key", ""))

    async def _bedrock(self, request: web.Request) -> web.StreamResponse:
        """Converse: the model id and streaming are in the path, tools in `toolConfig`; the
        access key id of the SigV4 credential is the key."""
        found = SIGV4_KEY.search(request.headers.get("Authorization", ""))
        body = await request.json()
        body["model"] = request.match_info["model_id"]
        body["stream"] = request.path.endswith("/converse-stream")
        body["tools"] = body.get("toolConfig", {}).get("tools")
        return await self._answer(request, BEDROCK, found.group(1) if found else "", body)

    def _record(
        self, api: Api, body: dict[str, Any], key: str, prefill: str | None, refused: bool
    ) -> Seen:
        model = str(body.get("model", ""))
        found = TAG.search(json.dumps(body.get("messages")))
        tag = found.group(1) if found else None
        # refused before any answer, a request takes no scripted mode: its next attempt does
        mode = REFUSED_PREFILL if refused else self.scripts.next(tag) or CLAUDE_ID.sub("", model)
        if mode.startswith("bad-crc") and not api.checksummed:
            mode = mode.replace("bad-crc", "bad-json")
        seen = Seen(
            api.name,
            model,
            mode,
            tag,
            key,
            bool(body.get("stream")),
            bool(body.get("tools")),
            prefill,
        )
        with self._lock:
            self._seen.append(seen)
        return seen

    async def _answer(
        self, request: web.Request, api: Api, key: str, body: dict[str, Any] | None = None
    ) -> web.StreamResponse:
        body = body if body is not None else await request.json()
        try:
            prefill = api.prefill(body)
        except BadPrefill as refused:
            last = last_assistant(body) or {}
            self._record(api, body, key, text_of(last.get("content")), refused=True)
            return _error(api, 400, str(refused))
        seen = self._record(api, body, key, prefill, refused=False)
        pieces = rest(prefill) if prefill is not None else TEXT_PIECES
        mode = seen.mode
        if mode.startswith("fail-"):
            status = int(mode.removeprefix("fail-"))
            return _error(
                api, status, f"faulty upstream refused the request with {status} ({mode})"
            )
        if mode.startswith("rate-limit"):
            wait = mode.removeprefix("rate-limit").removeprefix("-") or "1"
            headers = {"Retry-After": wait}
            if wait.endswith("ms"):
                ms = int(wait.removesuffix("ms"))
                headers = {"retry-after-ms": str(ms), "Retry-After": str(-(-ms // 1000))}
            return _error(api, 429, f"rate limited, retry in {wait}", headers)
        if mode == "reset-before":
            return await reset_connection(request)
        if mode == "slow-first-byte":
            await asyncio.sleep(SLOW_S)
            mode = "ok"
        elif mode == "overloaded" and not seen.stream:
            return _error(api, api.overloaded_status, "Overloaded")
        elif mode == "exception" and not seen.stream:
            return _error(api, api.exception_status, "faulty upstream gave up mid-answer")
        if mode not in ("ok", *FAILURES):
            return _error(api, 400, f"faulty upstream has no mode {mode!r}")
        if seen.stream:
            return await self._stream(request, api, mode, seen.tools, pieces)
        return await self._unary(request, api, mode, seen.tools, "".join(pieces))

    async def _stream(
        self, request: web.Request, api: Api, mode: str, tools: bool, pieces: list[str]
    ) -> web.StreamResponse:
        events = api.events(tools, pieces)
        # the events up to and including two content pieces (a continuation's rest may
        # have fewer: then the failure comes after those there are)
        some = api.lead + min(2, len(pieces))
        response = web.StreamResponse(headers={"Content-Type": api.content_type})
        await response.prepare(request)
        if mode == "overloaded":
            await _send(response, events[0] + api.overloaded_event)  # role / message_start
        elif mode in ("bad-json-first", "bad-crc-first"):
            first = events[api.lead]
            broken = api.broken if mode == "bad-json-first" else bad_crc(first)
            await _send(response, b"".join([*events[: api.lead], broken, *events[api.lead + 1 :]]))
        elif mode in AFTER_SOME_CONTENT:
            await _send(response, b"".join(events[:some]))
            await asyncio.sleep(0.05)  # let the gateway pass the content on first
            if mode == "reset-mid":
                return await reset_connection(request)
            if mode == "stall":
                await asyncio.sleep(HOLD_S)
            rest = events[some + 1 :]
            if mode in ("bad-json", "bad-crc"):
                broken = api.broken if mode == "bad-json" else bad_crc(events[some])
                await _send(response, b"".join([broken, *rest]))
            if mode == "exception":
                await _send(response, api.exception_event)
            if mode == "truncated-frame":
                await _send(response, events[some][: len(events[some]) // 2])
        else:
            await _send(response, b"".join(events))
        return response

    async def _unary(
        self, request: web.Request, api: Api, mode: str, tools: bool, text: str
    ) -> web.StreamResponse:
        whole = json.dumps(api.unary(tools, text)).encode()
        half = whole[: len(whole) // 2]
        if mode in ("ok", "overloaded"):
            return web.Response(body=whole, content_type="application/json")
        if mode in ("truncated", "truncated-frame"):
            return web.Response(body=half, content_type="application/json")
        if mode.startswith(("bad-json", "bad-crc")):
            return web.Response(body=b"{not json" + half, content_type="application/json")
        # reset-mid, stall: the whole body is announced, half of it arrives
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.content_length = len(whole)
        await response.prepare(request)
        await _send(response, half)
        await asyncio.sleep(0.05)
        if mode == "reset-mid":
            return await reset_connection(request)
        await asyncio.sleep(HOLD_S)
        return response


def _error(
    api: Api, status: int, message: str, retry: dict[str, str] | None = None
) -> web.Response:
    headers = api.error_headers(status)
    if retry and api.retry_after:
        headers.update(retry)
    return web.json_response(api.error(status, message), status=status, headers=headers)


async def _send(response: web.StreamResponse, blob: bytes) -> None:
    """Write `blob` in CUT-sized pieces; stop quietly once the client has gone away (a
    gateway drops a stream it found broken, and that is its right)."""
    try:
        for start in range(0, len(blob), CUT):
            await response.write(blob[start : start + CUT])
    except ConnectionResetError:
        return


async def reset_connection(request: web.Request) -> web.StreamResponse:
    """Reset the connection (RST, not FIN), then wait for aiohttp to cancel this handler."""
    transport = request.transport
    if transport is not None:
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        transport.abort()
    await asyncio.sleep(HOLD_S)
    raise ConnectionResetError("the faulty upstream reset this connection")
