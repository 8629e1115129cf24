"""OpenAI and every OpenAI-compatible server: Chat Completions, streamed and not, or, for a
target with `api: responses`, the Responses API (`{base_url}/responses`, translated by
`openai_responses.py`).

Sans-IO. The request body starts from the client's own JSON object, so fields the gateway
does not model are forwarded untouched and `""`, `null` and absent stay what they were. Only
three things change: `model` (the target's upstream id), and for streams `stream_options.
include_usage` (always asked for, so every stream is accounted for; the actor hides the
usage chunk from clients that did not ask).
"""

from __future__ import annotations

from collections.abc import Mapping

import msgspec

from gateway.config_base import effective_base_url
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEEvent
from gateway.providers.base import AdapterDefaults
from gateway.providers.base import ResetHeaders
from gateway.providers.base import StreamTranslator
from gateway.providers.base import Translated
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import context_window_error
from gateway.providers.base import excerpt_error
from gateway.providers.base import status_error
from gateway.providers.openai.config import OpenAIProvider
from gateway.providers.openai.responses import ResponsesStreamTranslator
from gateway.providers.openai.responses import responses_unary_result
from gateway.providers.openai.responses_request import responses_body
from gateway.providers.translate import chat_finish
from gateway.wire import DECODE_ERRORS
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ErrorDetail
from gateway.wire.openai_chat import FinishOnly
from gateway.wire.openai_chat import chunk_decoder
from gateway.wire.openai_chat import completion_usage_decoder
from gateway.wire.openai_chat import encoder
from gateway.wire.openai_chat import error_body_decoder

_DONE = b"[DONE]"
_LF = 10  # ord("\n"): an int needle is a plain memchr


def upstream_body(call: UpstreamCall) -> bytes:
    """The client's JSON with the upstream model and, for streams, usage asked for; for
    `api: responses` the Responses request (which always reports usage)."""
    if call.api == "responses":
        return encoder.encode(responses_body(call))
    body = dict(call.body)
    body["model"] = call.model
    if call.stream:
        body["stream"] = True
        options = body.get("stream_options")
        options = dict(options) if isinstance(options, dict) else {}
        options["include_usage"] = True
        body["stream_options"] = options
    return encoder.encode(body)


class ChatStreamTranslator:
    """OpenAI chat SSE events to canonical chunks: the chunk is the canonical form already."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done = False

    def feed(self, frame: SSEEvent) -> list[Translated]:
        data = frame.data
        if data == _DONE:
            self.done = True
            return []
        if not data.strip():
            return []
        try:
            chunk = chunk_decoder.decode(data)
        except DECODE_ERRORS as exc:
            raise UpstreamProtocolError(f"upstream sent a malformed chunk: {exc}") from None
        if chunk.error is not UNSET:
            raise stream_error(chunk.error)
        return [Translated(chunk, data if forwardable(data) else None)]

    def close(self) -> list[Translated]:
        return []


def forwardable(data: bytes) -> bool:
    """Whether the upstream's own bytes of a chunk can go to the client as one SSE data
    line; if not, the decoded chunk is encoded again. Not when they hold an LF (JSON sent
    over several `data:` lines, joined with LF: it would end the client's event early) or
    invalid UTF-8 (the chunk decoder does not look inside the fields it skips)."""
    if _LF in data:
        return False
    if data.isascii():
        return True
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def stream_error(detail: ErrorDetail) -> UpstreamStreamError:
    """An error event inside a 200 stream. Retryable: before the commit point another
    target may answer; after it the actor reports it to the client."""
    return UpstreamStreamError(
        detail.message or "the upstream reported an error mid-stream",
        code=str(detail.code) if detail.code is not None else None,
        param=detail.param,
    )


def error_from_body(status: int, body: bytes) -> UpstreamError:
    """Map an OpenAI-shaped error answer; anything else keeps a short excerpt of the body."""
    try:
        detail = error_body_decoder.decode(body).error
    except DECODE_ERRORS:
        return excerpt_error(status, body)
    return status_error(
        status, detail.message, type=detail.type, code=detail.code, param=detail.param
    )


# OpenAI's context-length error (code `context_length_exceeded`); OpenAI-compatible servers
# (vLLM, DeepSeek, llama.cpp) word it "maximum context length is N tokens" without the code
OPENAI_CODES = frozenset({"context_length_exceeded", "string_above_max_length"})
OPENAI_CONTEXT = ("maximum context length", "context length exceeded", "exceeds the context")

# x-ratelimit-remaining-requests / x-ratelimit-reset-requests: "6m0s", "20ms"
RATE_LIMITS = ResetHeaders(
    remaining="x-ratelimit-remaining-{}",
    reset="x-ratelimit-reset-{}",
    limits=("requests", "tokens"),
    form="duration",
)


def made_calls(choice: FinishOnly) -> bool:
    calls = choice.message.tool_calls if choice.message is not None else None
    return calls is not None and bool(msgspec.json.decode(calls))


def said_otherwise(choice: FinishOnly) -> bool:
    """A choice that made tool calls but ended with another word (OpenAI-compatible servers
    say `stop`): DESIGN §4 wants `tool_calls`, as a stream of the same answer gets."""
    return choice.finish_reason != "tool_calls" and made_calls(choice)


def with_tool_calls_finish(body: bytes) -> bytes:
    """The completion with `finish_reason` set by `chat_finish` on every choice that made
    calls; every other field as the upstream sent it (re-encoded, in its order)."""
    completion = msgspec.json.decode(body)
    for choice in completion.get("choices") or ():
        if isinstance(choice, dict) and isinstance(choice.get("message"), dict):
            calls = bool(choice["message"].get("tool_calls"))
            reason = choice.get("finish_reason")
            choice["finish_reason"] = chat_finish(
                reason if isinstance(reason, str) else "stop", calls
            )
    return encoder.encode(completion)


class OpenAIAdapter(AdapterDefaults):
    """Chat Completions against `base_url` (`https://api.openai.com/v1` by default)."""

    rate_limits = (RATE_LIMITS,)
    _continuation: str | None = None  # OpenAI itself (and Azure) continues no answer

    def __init__(self, provider: OpenAIProvider) -> None:
        base = effective_base_url(provider)
        self._url = base + "/chat/completions"
        self._responses_url = base + "/responses"
        # an OpenAI-compatible server that declares how it continues an answer
        if provider.continuation != "none":
            self._continuation = provider.continuation

    def prefill_mode(self, model: str) -> str | None:
        return self._continuation

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        headers = {"Content-Type": "application/json"}
        if call.stream:
            headers["Accept"] = "text/event-stream"
        if call.key is not None and call.key.key:
            headers["Authorization"] = "Bearer " + call.key.key.reveal()
        url = self._responses_url if call.api == "responses" else self._url
        return UpstreamRequest(url=url, headers=headers, body=upstream_body(call))

    def translator(self, call: UpstreamCall) -> StreamTranslator:
        if call.api == "responses":
            return ResponsesStreamTranslator(model=call.model, created=call.created)
        return ChatStreamTranslator()

    def unary_result(self, call: UpstreamCall, body: bytes) -> UnaryResult:
        if call.api == "responses":
            return responses_unary_result(call, body)
        try:
            parsed = completion_usage_decoder.decode(body)
        except DECODE_ERRORS as exc:
            raise UpstreamProtocolError(f"upstream sent a malformed completion: {exc}") from None
        usage = parsed.usage if parsed.usage is not UNSET else None
        model = parsed.model if parsed.model is not UNSET else None
        if any(said_otherwise(choice) for choice in parsed.choices):
            body = with_tool_calls_finish(body)
        return UnaryResult(body=body, usage=usage, model=model)

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError:
        return context_window_error(error_from_body(status, body), OPENAI_CONTEXT, OPENAI_CODES)
