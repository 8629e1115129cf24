"""Anthropic Messages API: `POST {base_url}/v1/messages`, streamed and not. Sans-IO.

The request is built in `anthropic_request.py`. This module turns Anthropic's answer back
into canonical chat chunks (streams) or one `chat.completion` (non-streaming):

- Tool calls are content blocks (`translate.ToolBlocks`): their deltas carry the content-
  block index, the upstream's identity of the call; the OpenAI `index` the client sees is
  the stream's accumulator's count of calls (a text or thinking block before a call does
  not shift it). Argument deltas are routed by block index. `server_tool_use` and other
  server-side blocks are Anthropic's own tools: never client tool calls.
- A tool whose arguments were never sent (or sent as `""`) ends with `"{}"`.
- Thinking text goes to `reasoning_content`, never to `content`.
- Usage is `message_start` input (+ cache read and creation) and the cumulative
  `message_delta` output; one finish chunk and one usage chunk leave at `message_stop`.
- The data JSON is authoritative (some recordings have no `event:` lines).

Native mode (`call.native`: an Anthropic Messages client): the client's own body goes
upstream with only `model` and `stream` set, plus its `anthropic-beta` header; the
translator still reads the stream (usage, tool-call identity, the commit point), and a
non-streaming answer is handed on as the upstream's bytes.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config_base import effective_base_url
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEEvent
from gateway.providers.anthropic.config import AnthropicProvider
from gateway.providers.anthropic.count_tokens import count_tokens
from gateway.providers.anthropic.request import answer_tool
from gateway.providers.anthropic.request import build_messages_request
from gateway.providers.base import PREFILL
from gateway.providers.base import AdapterDefaults
from gateway.providers.base import ResetHeaders
from gateway.providers.base import TokenCount
from gateway.providers.base import Translated
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import context_window_error
from gateway.providers.base import excerpt_error
from gateway.providers.base import status_error
from gateway.providers.base import tool_input_text
from gateway.providers.translate import STOP_REASONS
from gateway.providers.translate import ChunkTranslator
from gateway.providers.translate import ToolBlocks
from gateway.providers.translate import answer_message
from gateway.providers.translate import decoded_event
from gateway.providers.translate import mapped_finish
from gateway.providers.translate import one_choice
from gateway.wire import DECODE_ERRORS
from gateway.wire.anthropic import ANTHROPIC_VERSION
from gateway.wire.anthropic import AnthropicUsage
from gateway.wire.anthropic import StreamEvent
from gateway.wire.anthropic import encoder as anthropic_encoder
from gateway.wire.anthropic import error_body_decoder
from gateway.wire.anthropic import event_decoder
from gateway.wire.anthropic import message_decoder
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionCall
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import ToolCall
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import encoder

FINISH_REASONS = {**STOP_REASONS, "pause_turn": "stop", "refusal": "content_filter"}
# error events (https://docs.anthropic.com/en/api/errors) a moment later may not repeat
TRANSIENT_ERRORS = frozenset({"overloaded_error", "api_error"})
# "prompt is too long: 210000 tokens > 200000 maximum"; "input length and `max_tokens`
# exceed context limit: ..."
ANTHROPIC_CONTEXT = ("prompt is too long", "exceed context limit")
BETA_HEADER = "anthropic-beta"  # the one client header a native request carries upstream


def finish_reason(stop_reason: str | None, made_calls: bool) -> str:
    """The chat finish_reason of an Anthropic stop_reason (`tool_use` without client calls:
    the forced answer tool, or only server-side tools, is `stop`)."""
    return mapped_finish(FINISH_REASONS, stop_reason, made_calls)


class UsageCounter:
    """Anthropic usage as it arrives: input once, output cumulative; OpenAI usage out."""

    __slots__ = ("cache_creation", "cache_read", "input", "output")

    def __init__(self) -> None:
        self.input = self.output = self.cache_read = self.cache_creation = 0

    def update(self, usage: AnthropicUsage | None) -> None:
        if usage is None:
            return
        if usage.input_tokens is not None:
            self.input = usage.input_tokens
        if usage.output_tokens is not None:
            self.output = usage.output_tokens
        if usage.cache_read_input_tokens is not None:
            self.cache_read = usage.cache_read_input_tokens
        if usage.cache_creation_input_tokens is not None:
            self.cache_creation = usage.cache_creation_input_tokens

    def usage(self) -> Usage:
        prompt = self.input + self.cache_read + self.cache_creation
        return Usage(
            prompt_tokens=prompt,
            completion_tokens=self.output,
            total_tokens=prompt + self.output,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=self.cache_read),
        )


class AnthropicStreamTranslator(ChunkTranslator):
    """Anthropic SSE events to canonical chunks; one instance per stream."""

    __slots__ = ("_answer_tool", "_blocks", "_on_block", "_stop_reason", "_usage")

    def __init__(self, *, model: str, created: int, answer_tool: str | None = None) -> None:
        super().__init__(id="", created=created, model=model)
        self._answer_tool = answer_tool
        self._blocks = ToolBlocks()
        self._on_block = {
            "content_block_delta": self._delta,
            "content_block_start": self._start,
            "content_block_stop": self._stop,
        }
        self._stop_reason: str | None = None
        self._usage = UsageCounter()

    def feed(self, frame: SSEEvent) -> list[Translated]:
        data = frame.data
        if not data.strip():
            return []
        event = decoded_event(event_decoder, data)
        kind = event.type or frame.event
        on_block = self._on_block.get(kind)
        if on_block is not None:
            return on_block(event)
        if kind == "message_start":
            message = event.message
            if message is not None:
                self._id = message.id
                self._model = message.model or self._model
                self._usage.update(message.usage)
            return [self._chunk(Delta(role="assistant", content=""))]
        if kind == "message_delta":
            if event.delta is not None and event.delta.stop_reason is not None:
                self._stop_reason = event.delta.stop_reason
            self._usage.update(event.usage)
            return []
        if kind == "message_stop":
            return self._end()
        if kind == "error":
            error = event.error
            raise UpstreamStreamError(
                (error.message if error else "") or "the upstream reported an error mid-stream",
                code=(error.type or None) if error else None,
                transient=error is not None and error.type in TRANSIENT_ERRORS,
            )
        return []  # ping, and event types added after this was written

    def _start(self, event: StreamEvent) -> list[Translated]:
        block = event.content_block
        if block is None or event.index is None:
            return []
        if block.type == "text" and block.text:
            return [self._chunk(Delta(content=block.text))]
        if block.type == "thinking" and block.thinking:
            return [self._chunk(Delta(reasoning_content=block.thinking))]
        if block.type != "tool_use":
            return []  # server_tool_use, *_tool_result, redacted_thinking: not client calls
        if self._answer_tool is not None and block.name == self._answer_tool:
            self._blocks.start_answer(event.index)
            return []
        return [self._chunk(self._blocks.start(event.index, block.id or "", block.name or ""))]

    def _delta(self, event: StreamEvent) -> list[Translated]:
        delta = event.delta
        if delta is None:
            return []
        if delta.type == "text_delta":
            return [self._chunk(Delta(content=delta.text))] if delta.text else []
        if delta.type == "thinking_delta":
            return [self._chunk(Delta(reasoning_content=delta.thinking))] if delta.thinking else []
        if delta.type != "input_json_delta" or not delta.partial_json or event.index is None:
            return []
        arguments = self._blocks.arguments(event.index, delta.partial_json)
        return [self._chunk(arguments)] if arguments is not None else []  # None: a server tool

    def _stop(self, event: StreamEvent) -> list[Translated]:
        if event.index is None:
            return []
        arguments = self._blocks.stop(event.index)  # no arguments at all: an empty object
        return [self._chunk(arguments)] if arguments is not None else []

    def _end(self) -> list[Translated]:
        if self.done:
            return []
        self.done = True
        reason = finish_reason(self._stop_reason, self._blocks.made_calls)
        return [self._chunk(Delta(), reason), self._usage_chunk(self._usage.usage())]

    def close(self) -> list[Translated]:
        return []


def completion_from_message(call: UpstreamCall, body: bytes) -> tuple[ChatCompletion, Usage]:
    """A non-streaming Anthropic answer as one `chat.completion`."""
    message = decoded_event(message_decoder, body, "message")
    forced = answer_tool(call.request)
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    for block in message.content:
        if block.type == "text" and block.text:
            texts.append(block.text)
        elif block.type == "thinking" and block.thinking:
            thinking.append(block.thinking)
        elif block.type == "tool_use":
            raw = bytes(block.input) if block.input else b""
            arguments = tool_input_text(raw) if raw.strip() else "{}"
            if forced is not None and block.name == forced:
                texts.append(arguments)
            else:
                calls.append(
                    ToolCall(
                        id=block.id or f"call_{call.request_id}_{len(calls)}",
                        function=FunctionCall(name=block.name or "", arguments=arguments),
                    )
                )
    counter = UsageCounter()
    counter.update(message.usage)
    usage = counter.usage()
    reason = finish_reason(message.stop_reason, bool(calls))
    result = answer_message(texts, thinking, calls)
    return one_choice(call, result, reason, usage, id=message.id, model=message.model), usage


def native_unary_result(call: UpstreamCall, body: bytes) -> UnaryResult:
    """A non-streaming answer for a Messages client: the upstream's bytes as they are, read
    only for usage and the model id."""
    try:
        message = message_decoder.decode(body)
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"upstream sent a malformed message: {exc}") from None
    counter = UsageCounter()
    counter.update(message.usage)
    return UnaryResult(
        body=body, usage=counter.usage(), model=message.model or call.model, api="messages"
    )


def error_from_body(status: int, body: bytes) -> UpstreamError:
    """Map an Anthropic error body; anything else keeps a short excerpt of the body."""
    try:
        error = error_body_decoder.decode(body).error
    except DECODE_ERRORS:
        return excerpt_error(status, body)
    return status_error(status, error.message, type=error.type or None, code=error.type or None)


# anthropic-ratelimit-requests-remaining / anthropic-ratelimit-requests-reset: RFC 3339
RATE_LIMITS = ResetHeaders(
    remaining="anthropic-ratelimit-{}-remaining",
    reset="anthropic-ratelimit-{}-reset",
    limits=("requests", "tokens", "input-tokens", "output-tokens"),
    form="time",
)


class AnthropicAdapter(AdapterDefaults):
    """The `anthropic` kind, against `base_url` (`https://api.anthropic.com` by default)."""

    # an Anthropic Messages client's request is forwarded as is (see the module docstring)
    native_apis: frozenset[str] = frozenset({"messages"})
    rate_limits = (RATE_LIMITS,)

    def __init__(self, provider: AnthropicProvider) -> None:
        self._url = effective_base_url(provider) + "/v1/messages"

    def prefill_mode(self, model: str) -> str | None:
        return PREFILL  # a last assistant turn is the answer's start (a prefill)

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        headers = {"content-type": "application/json", "anthropic-version": ANTHROPIC_VERSION}
        if call.stream:
            headers["accept"] = "text/event-stream"
        if call.key is not None and call.key.key:
            headers["x-api-key"] = call.key.key.reveal()
        native = call.native
        if native is None:
            body = anthropic_encoder.encode(build_messages_request(call))
            return UpstreamRequest(url=self._url, headers=headers, body=body)
        beta = native.headers.get(BETA_HEADER)
        if beta is not None:
            headers[BETA_HEADER] = beta
        # the client's request as it sent it: fields this gateway has never heard of included
        forwarded = dict(native.body)
        forwarded["model"] = call.model
        forwarded["stream"] = call.stream
        return UpstreamRequest(
            url=self._url, headers=headers, body=anthropic_encoder.encode(forwarded)
        )

    def count_tokens(self, call: UpstreamCall) -> TokenCount:
        return count_tokens(self._url + "/count_tokens", self.build_request(call).headers, call)

    def translator(self, call: UpstreamCall) -> AnthropicStreamTranslator:
        # a native request never carries the gateway's structured-answer tool
        forced = answer_tool(call.request) if call.native is None else None
        return AnthropicStreamTranslator(model=call.model, created=call.created, answer_tool=forced)

    def unary_result(self, call: UpstreamCall, body: bytes) -> UnaryResult:
        if call.native is not None:
            return native_unary_result(call, body)
        completion, usage = completion_from_message(call, body)
        return UnaryResult(body=encoder.encode(completion), usage=usage, model=completion.model)

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError:
        return context_window_error(error_from_body(status, body), ANTHROPIC_CONTEXT)
