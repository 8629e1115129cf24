"""AWS Bedrock Converse API: `POST {base_url}/model/{model}/converse-stream` (AWS
event-stream frames) and `/converse` (JSON). Sans-IO.

The request is built in `bedrock/request.py` and signed with SigV4 (`sigv4.py`) for
`aws_access_key_id` keys and `identity: default` keys (with the AWS credentials fetched for
them: `token_source`), or sent with `Authorization: Bearer` for Bedrock API keys
(`bedrock/auth.py`). The model id is percent-encoded as one path segment (`a:b` -> `a%3Ab`).

count_tokens is Bedrock's CountTokens (`POST /model/{model}/count-tokens`, body `{"input":
{"converse": {messages, system, toolConfig}}}`, answer `{"inputTokens": n}`), authenticated
as the chat request is.

Stream translation (frames are `EventStreamMessage`s):

- Tool calls are content blocks (`translate.ToolBlocks`): their deltas carry the
  `contentBlockIndex`, which counts text blocks too (which get no `contentBlockStart`); the
  OpenAI `index` the client sees is the stream's accumulator's count of calls.
  `toolUse.input` deltas are string fragments routed by block index. A call whose input
  never came ends with `"{}"` at its `contentBlockStop`. `server_tool_use` blocks are
  Bedrock's own tools: never client calls.
- `messageStop` gives the finish chunk; usage comes after it in `metadata`, which gives the
  usage chunk and ends the stream (`done`). A stream that ends after `messageStop` without
  `metadata` is finished too (`close` sets `done`), with no usage chunk.
- `:message-type: exception` (and `error`) frames raise `UpstreamStreamError` with the
  exception type as code; throttling, unavailable, internal and model-stream errors are
  retryable.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC
from datetime import datetime

import msgspec

from gateway.config_base import ProviderKey
from gateway.config_base import effective_base_url
from gateway.errors import InternalError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.aws_eventstream import EventStreamMessage
from gateway.providers.base import PREFILL
from gateway.providers.base import AdapterDefaults
from gateway.providers.base import TokenCount
from gateway.providers.base import TokenSource
from gateway.providers.base import Translated
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import context_window_error
from gateway.providers.base import path_segment
from gateway.providers.base import status_error
from gateway.providers.base import tool_input_text
from gateway.providers.bedrock.auth import authorized
from gateway.providers.bedrock.auth import identity_source
from gateway.providers.bedrock.config import BedrockProvider
from gateway.providers.bedrock.request import build_converse_request
from gateway.providers.translate import STOP_REASONS
from gateway.providers.translate import ChunkTranslator
from gateway.providers.translate import ToolBlocks
from gateway.providers.translate import answer_message
from gateway.providers.translate import decoded_event
from gateway.providers.translate import mapped_finish
from gateway.providers.translate import one_choice
from gateway.wire import DECODE_ERRORS
from gateway.wire.bedrock import StreamEvent
from gateway.wire.bedrock import TokenUsage
from gateway.wire.bedrock import encoder as bedrock_encoder
from gateway.wire.bedrock import error_body_decoder
from gateway.wire.bedrock import event_decoder
from gateway.wire.bedrock import fragment_decoder
from gateway.wire.bedrock import response_decoder
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionCall
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import ToolCall
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import encoder

FINISH_REASONS = {
    **STOP_REASONS,
    "guardrail_intervened": "content_filter",
    "content_filtered": "content_filter",
}
RETRYABLE_EXCEPTIONS = frozenset(
    {
        "throttlingException",
        "serviceUnavailableException",
        "internalServerException",
        "modelStreamErrorException",
    }
)
# of those, the ones the same target may not repeat a moment later (not its throttling)
TRANSIENT_EXCEPTIONS = frozenset(
    {"serviceUnavailableException", "internalServerException", "modelStreamErrorException"}
)
# ValidationException: "Input is too long for requested model."; for Claude, the model's
# own "prompt is too long: N tokens > M maximum"
BEDROCK_CONTEXT = ("input is too long", "prompt is too long", "too many input tokens")
SERVER_TOOL = "server_tool_use"


def finish_reason(stop_reason: str | None, made_calls: bool) -> str:
    return mapped_finish(FINISH_REASONS, stop_reason, made_calls)


def usage_of(usage: TokenUsage | None) -> Usage:
    """OpenAI usage: prompt = input + cache reads + cache writes (Bedrock counts them apart)."""
    if usage is None:
        return Usage()
    cache_read = usage.cache_read_input_tokens or 0
    prompt = (usage.input_tokens or 0) + cache_read + (usage.cache_write_input_tokens or 0)
    completion = usage.output_tokens or 0
    out = Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
    if usage.cache_read_input_tokens is not None:
        out.prompt_tokens_details = PromptTokensDetails(cached_tokens=cache_read)
    return out


class BedrockStreamTranslator(ChunkTranslator):
    """ConverseStream event-stream messages to canonical chunks; one instance per stream."""

    __slots__ = ("_finished", "_on_block", "_tools")

    def __init__(self, *, model: str, created: int, id: str) -> None:
        super().__init__(id=id, created=created, model=model)
        self._tools = ToolBlocks()  # by contentBlockIndex
        self._on_block = {
            "contentBlockDelta": self._delta,
            "contentBlockStart": self._start,
            "contentBlockStop": self._stop,
        }
        self._finished = False

    def feed(self, frame: EventStreamMessage) -> list[Translated]:
        kind = frame.message_type
        if kind == "exception":
            raise self._exception(frame)
        if kind == "error":
            raise UpstreamStreamError(
                frame.error_message or "the upstream reported an error mid-stream",
                code=frame.error_code,
            )
        payload = frame.payload
        event = decoded_event(event_decoder, payload) if payload else StreamEvent()
        name = frame.event_type
        on_block = self._on_block.get(name or "")
        if on_block is not None:
            return on_block(event)
        if name == "messageStart":
            return [self._chunk(Delta(role="assistant", content=""))]
        if name == "messageStop":
            if self._finished:
                return []
            self._finished = True
            return [self._chunk(Delta(), finish_reason(event.stop_reason, self._tools.made_calls))]
        if name == "metadata":
            if self.done:
                return []
            self.done = True
            return [self._usage_chunk(usage_of(event.usage))]
        return []  # event types added after this was written

    @staticmethod
    def _exception(frame: EventStreamMessage) -> UpstreamStreamError:
        code = frame.exception_type or "exception"
        message = ""
        try:
            message = event_decoder.decode(frame.payload).message or ""
        except DECODE_ERRORS:
            message = frame.payload[:300].decode("utf-8", "replace").strip()
        return UpstreamStreamError(
            message or f"the upstream reported {code} mid-stream",
            code=code,
            retryable=code in RETRYABLE_EXCEPTIONS,
            transient=code in TRANSIENT_EXCEPTIONS,
        )

    def _start(self, event: StreamEvent) -> list[Translated]:
        start = event.start
        index = event.content_block_index
        if start is None or start.tool_use is None or index is None:
            return []
        tool = start.tool_use
        if tool.type == SERVER_TOOL:
            return []
        return [self._chunk(self._tools.start(index, tool.tool_use_id or "", tool.name or ""))]

    def _delta(self, event: StreamEvent) -> list[Translated]:
        delta = event.delta
        if delta is None:
            return []
        if delta.text:
            return [self._chunk(Delta(content=delta.text))]
        reasoning = delta.reasoning_content
        if reasoning is not None and reasoning.text:
            return [self._chunk(Delta(reasoning_content=reasoning.text))]
        if delta.tool_use is None or not len(delta.tool_use.input):
            return []
        index = event.content_block_index
        if index is None or index not in self._tools:
            return []  # a server-side tool's input, or a block never started
        try:
            fragment = fragment_decoder.decode(delta.tool_use.input)
        except DECODE_ERRORS:
            raise UpstreamProtocolError("upstream sent a non-string toolUse input delta") from None
        arguments = self._tools.arguments(index, fragment) if fragment else None
        return [self._chunk(arguments)] if arguments is not None else []

    def _stop(self, event: StreamEvent) -> list[Translated]:
        index = event.content_block_index
        arguments = self._tools.stop(index) if index is not None else None
        return [self._chunk(arguments)] if arguments is not None else []

    def close(self) -> list[Translated]:
        if self._finished:
            self.done = True  # messageStop came; only the usage (metadata) is missing
        return []


def completion_from_response(call: UpstreamCall, body: bytes) -> tuple[ChatCompletion, Usage]:
    """A Converse answer as one `chat.completion`."""
    response = decoded_event(response_decoder, body, "answer")
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[ToolCall] = []
    message = response.output.message if response.output is not None else None
    for block in message.content if message is not None else []:
        if block.text:
            texts.append(block.text)
        elif block.reasoning_content is not None:
            reasoning = block.reasoning_content.reasoning_text
            if reasoning is not None and reasoning.text:
                thinking.append(reasoning.text)
        elif block.tool_use is not None and block.tool_use.type != SERVER_TOOL:
            tool = block.tool_use
            raw = bytes(tool.input)
            arguments = tool_input_text(raw) if raw.strip() not in (b"", b"null") else "{}"
            calls.append(
                ToolCall(
                    id=tool.tool_use_id or f"call_{call.request_id}_{len(calls)}",
                    function=FunctionCall(name=tool.name or "", arguments=arguments),
                )
            )
    usage = usage_of(response.usage)
    reason = finish_reason(response.stop_reason, bool(calls))
    return one_choice(call, answer_message(texts, thinking, calls), reason, usage), usage


def _header(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is not None:
        return value
    for key, found in headers.items():
        if key.lower() == name:
            return found
    return None


def error_from_body(status: int, body: bytes, headers: Mapping[str, str]) -> UpstreamError:
    """An AWS error answer: `x-amzn-errortype` (`ThrottlingException:...`) and `{"message"}`."""
    kind = (_header(headers, "x-amzn-errortype") or "").split(":", 1)[0] or None
    try:
        parsed = error_body_decoder.decode(body)
        message = parsed.message or parsed.Message or ""
    except DECODE_ERRORS:
        message = body[:300].decode("utf-8", "replace").strip()
    return status_error(status, message or f"upstream answered HTTP {status}", type=kind, code=kind)


# what ConverseTokensRequest takes of a Converse body (no inferenceConfig)
COUNT_TOKENS_FIELDS = frozenset({"messages", "system", "toolConfig"})


class _CountTokensAnswer(msgspec.Struct, rename="camel"):
    input_tokens: int


_count_decoder = msgspec.json.Decoder(_CountTokensAnswer)


def read_input_tokens(body: bytes) -> int:
    try:
        return _count_decoder.decode(body).input_tokens
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"malformed CountTokens answer: {exc}") from None


def signing_time(call: UpstreamCall) -> datetime:
    """The attempt's own time (`call.now`, read by the caller) for SigV4: sans-IO, this
    module reads no clock. A caller that forgot it is a bug, not a request from 1970."""
    if call.now <= 0:
        raise InternalError("a bedrock request was built without the attempt's time (now)")
    return datetime.fromtimestamp(call.now, UTC)


class BedrockAdapter(AdapterDefaults):
    """The `bedrock` kind, against `base_url` or `https://bedrock-runtime.{region}.amazonaws.com`."""

    framing = "aws-eventstream"

    def __init__(self, provider: BedrockProvider) -> None:
        self._provider = provider
        self._base = effective_base_url(provider)
        self._region = provider.region

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return identity_source(self._provider, key)

    def prefill_mode(self, model: str) -> str | None:
        # Converse takes a last assistant turn as a prefill for Anthropic's models only
        # (`anthropic.claude-...`, and the inference profiles `us.anthropic.claude-...`)
        return PREFILL if "anthropic." in model else None

    def count_tokens(self, call: UpstreamCall) -> TokenCount:
        url = f"{self._base}/model/{path_segment(call.model)}/count-tokens"
        converse = msgspec.to_builtins(build_converse_request(call))
        counted = {k: v for k, v in converse.items() if k in COUNT_TOKENS_FIELDS}
        body = msgspec.json.encode({"input": {"converse": counted}})
        headers = {"content-type": "application/json", "accept": "application/json"}
        if call.credential is not None or self.token_source(call.key) is None:
            # (the route first asks whether the kind can count, before any credential is
            # fetched; the attempt itself always has its credential)
            headers = authorized(
                url, headers, body, call.key, self._region, signing_time(call), call.credential
            )
        return TokenCount(
            request=UpstreamRequest(url=url, headers=headers, body=body), read=read_input_tokens
        )

    def url(self, call: UpstreamCall) -> str:
        action = "converse-stream" if call.stream else "converse"
        return f"{self._base}/model/{path_segment(call.model)}/{action}"

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        url = self.url(call)
        headers = {
            "content-type": "application/json",
            "accept": "application/vnd.amazon.eventstream" if call.stream else "application/json",
        }
        body = bedrock_encoder.encode(build_converse_request(call))
        headers = authorized(
            url, headers, body, call.key, self._region, signing_time(call), call.credential
        )
        return UpstreamRequest(url=url, headers=headers, body=body)

    def translator(self, call: UpstreamCall) -> BedrockStreamTranslator:
        return BedrockStreamTranslator(
            model=call.model, created=call.created, id="chatcmpl-" + call.request_id
        )

    def unary_result(self, call: UpstreamCall, body: bytes) -> UnaryResult:
        completion, usage = completion_from_response(call, body)
        return UnaryResult(body=encoder.encode(completion), usage=usage, model=completion.model)

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError:
        return context_window_error(error_from_body(status, body, headers), BEDROCK_CONTEXT)
