"""The OpenAI Responses API as an upstream (`api: responses`), sans-IO: its stream and its
non-streaming answer turned into canonical chat chunks / one `chat.completion`.

The request is built in `openai_responses_request.py`; the URL and authentication are the
adapter's (`openai.py`, `azure.py`). The rules of the translation:

- Argument deltas are routed by `item_id` to the `function_call` item they belong to, never
  to the most recent call: parallel calls may interleave.
- The chat tool-call `index` is the stream's accumulator's count of calls started (this
  translator routes a call's deltas by its id). `output_index` counts every output item
  (reasoning, messages, calls, server tools), so it is never used as the tool-call index.
- A call's first chunk carries `id` = the item's `call_id` (what a tool result must name;
  the item's own `id`, `fc_...`, is not), `type` and `name`; later ones only arguments.
  The `.done` events repeat the whole arguments: they are sent only for a call that had no
  argument delta at all (a server that sends calls whole).
- Text deltas are `content`; reasoning text and reasoning summary deltas `reasoning_content`;
  refusal deltas `refusal`.
- The stream ends at `response.completed` (finish `stop`; the accumulator makes it
  `tool_calls` when calls were made) or `response.incomplete` (`length` for
  max_output_tokens, `content_filter` for content_filter), with the usage the response
  carries. There is no `[DONE]`.
- `response.failed` and `error` events raise `UpstreamStreamError`, retryable when the code
  says the upstream was overloaded or rate limited: before the commit point the actor then
  tries the next target.
"""

from __future__ import annotations

from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEEvent
from gateway.providers.base import Translated
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.translate import ChunkTranslator
from gateway.providers.translate import answer_message
from gateway.providers.translate import chat_finish
from gateway.providers.translate import one_choice
from gateway.wire import DECODE_ERRORS
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import CompletionTokensDetails
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionCall
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import ToolCall
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import encoder
from gateway.wire.openai_responses import ResponseErrorInfo
from gateway.wire.openai_responses import ResponseHead
from gateway.wire.openai_responses import ResponsesUsage
from gateway.wire.openai_responses import StreamItem
from gateway.wire.openai_responses import event_decoder
from gateway.wire.openai_responses import event_type_decoder
from gateway.wire.openai_responses import response_decoder
from gateway.wire.openai_responses import response_head_decoder

# error codes of a failed response that another attempt may not get
RETRYABLE_CODES = frozenset(
    {"server_error", "rate_limit_exceeded", "rate_limit_error", "overloaded", "timeout"}
)
# of those, the ones the same target may not repeat a moment later (not its rate limits)
TRANSIENT_CODES = frozenset({"server_error", "overloaded", "timeout"})
INCOMPLETE_REASONS = {"max_output_tokens": "length", "content_filter": "content_filter"}
_TEXT_DELTAS = frozenset({"response.output_text.delta", "response.text.delta"})
_REASONING_DELTAS = frozenset(
    {"response.reasoning_summary_text.delta", "response.reasoning_text.delta"}
)


def chat_usage(usage: ResponsesUsage) -> Usage:
    """Responses usage in chat's words: input -> prompt, output -> completion tokens."""
    cached = usage.input_tokens_details.cached_tokens if usage.input_tokens_details else None
    reasoning = (
        usage.output_tokens_details.reasoning_tokens if usage.output_tokens_details else None
    )
    total = usage.total_tokens
    return Usage(
        prompt_tokens=usage.input_tokens,
        completion_tokens=usage.output_tokens,
        total_tokens=total if total is not None else usage.input_tokens + usage.output_tokens,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached or 0),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning or 0),
    )


def failure(error: ResponseErrorInfo | None, default: str) -> UpstreamStreamError:
    """The error for a failed response or an `error` event."""
    code = str(error.code) if error is not None and error.code is not None else None
    message = (error.message if error is not None else "") or default
    param = error.param if error is not None else None
    retryable = code is None or code in RETRYABLE_CODES
    return UpstreamStreamError(
        message, retryable=retryable, code=code, param=param, transient=code in TRANSIENT_CODES
    )


def finish_reason(status: str, head: ResponseHead | None) -> str:
    """The chat finish_reason of a response that ended with `status`."""
    if status == "incomplete" and head is not None:
        details = head.incomplete_details
        reason = details.reason if details is not None else None
        return INCOMPLETE_REASONS.get(reason or "", "length")
    return "stop"


class ResponsesStreamTranslator(ChunkTranslator):
    """Responses SSE events to canonical chunks; one instance per stream."""

    __slots__ = ("_began", "_calls", "_silent")

    def __init__(self, *, model: str, created: int) -> None:
        super().__init__(id="", created=created, model=model)
        self._began = False  # the role chunk has been sent
        self._calls: dict[str, str] = {}  # function_call item id -> the chat tool-call id
        self._silent: set[str] = set()  # call items whose arguments have not been sent yet

    def feed(self, frame: SSEEvent) -> list[Translated]:
        data = frame.data
        if not data.strip():
            return []
        try:
            event = event_decoder.decode(data)
        except DECODE_ERRORS as exc:
            if _is_unknown_event(data):
                return []  # a type added after this was written, using a field differently
            raise UpstreamProtocolError(f"upstream sent a malformed event: {exc}") from None
        kind = event.type or frame.event
        if kind in _TEXT_DELTAS:
            return [self._chunk(Delta(content=event.delta))] if event.delta else []
        if kind == "response.function_call_arguments.delta":
            return self._arguments(event.item_id, event.delta)
        if kind in _REASONING_DELTAS:
            return [self._chunk(Delta(reasoning_content=event.delta))] if event.delta else []
        if kind == "response.refusal.delta":
            return [self._chunk(Delta(refusal=event.delta))] if event.delta else []
        if kind == "response.output_item.added":
            return self._item_added(event.item)
        if kind == "response.function_call_arguments.done":
            return self._arguments_done(event.item_id, event.arguments)
        if kind == "response.output_item.done" and event.item is not None:
            return self._arguments_done(event.item.id, event.item.arguments)
        if kind in ("response.created", "response.in_progress", "response.queued"):
            return self._started(event.response)
        if kind == "response.completed":
            return self._end(event.response, "completed")
        if kind == "response.incomplete":
            return self._end(event.response, "incomplete")
        if kind == "response.failed":
            head = event.response
            raise failure(head.error if head else None, "the upstream response failed")
        if kind == "error":
            error = event.error or ResponseErrorInfo(
                code=event.code, message=event.message or "", param=event.param
            )
            raise failure(error, "the upstream reported an error mid-stream")
        return []  # other .done events repeat what the deltas said; server-tool progress

    def _started(self, head: ResponseHead | None) -> list[Translated]:
        if head is None or self._began:
            return []
        self._began = True
        self._id = head.id
        self._model = head.model or self._model
        return [self._chunk(Delta(role="assistant", content=""))]

    def _item_added(self, item: StreamItem | None) -> list[Translated]:
        if item is None or item.type != "function_call":
            return []
        if item.id is None:
            raise UpstreamProtocolError("a function_call item without an id", retryable=True)
        call_id = self._calls[item.id] = item.call_id or item.id
        if not item.arguments:
            self._silent.add(item.id)
        first = ToolCallDelta(
            id=call_id,
            type="function",
            function=FunctionDelta(name=item.name or "", arguments=item.arguments or ""),
        )
        return [self._chunk(Delta(tool_calls=[first]))]

    def _arguments(self, item_id: str | None, text: str | None) -> list[Translated]:
        call_id = self._calls.get(item_id or "")
        if call_id is None:
            raise UpstreamProtocolError(
                f"arguments for an unknown function_call item {item_id!r}", retryable=True
            )
        if not text:
            return []
        self._silent.discard(item_id or "")
        # routed by the call's id: the accumulator gives the client its index
        call = ToolCallDelta(id=call_id, function=FunctionDelta(arguments=text))
        return [self._chunk(Delta(tool_calls=[call]))]

    def _arguments_done(self, item_id: str | None, text: str | None) -> list[Translated]:
        """The whole arguments of a call: sent only if no delta sent any (a server that
        streams calls whole), so nothing is ever sent twice."""
        if item_id is None or item_id not in self._silent or not text:
            return []
        return self._arguments(item_id, text)

    def _end(self, head: ResponseHead | None, status: str) -> list[Translated]:
        if self.done:
            return []
        self.done = True
        if head is not None and not self._id:
            self._id, self._model = head.id, head.model or self._model
        out = [self._chunk(Delta(), finish_reason(status, head))]
        if head is not None and head.usage is not None:
            out.append(self._usage_chunk(chat_usage(head.usage)))
        return out

    def close(self) -> list[Translated]:
        return []


_HANDLED = frozenset(
    {
        *_TEXT_DELTAS,
        *_REASONING_DELTAS,
        "response.function_call_arguments.delta",
        "response.refusal.delta",
        "response.output_item.added",
        "response.output_item.done",
        "response.function_call_arguments.done",
        "response.created",
        "response.in_progress",
        "response.queued",
        "response.completed",
        "response.incomplete",
        "response.failed",
    }
)


def _is_unknown_event(data: bytes) -> bool:
    try:
        kind = event_type_decoder.decode(data).type
    except DECODE_ERRORS:
        return False
    return kind.startswith("response.") and kind not in _HANDLED


def completion_from_response(
    call: UpstreamCall, body: bytes
) -> tuple[ChatCompletion, Usage | None]:
    """A non-streaming Responses answer as one `chat.completion`."""
    try:
        response = response_decoder.decode(body)
    except DECODE_ERRORS as exc:
        raise UpstreamProtocolError(f"upstream sent a malformed response: {exc}") from None
    if response.status == "failed":
        raise failure(response.error, "the upstream response failed")
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    calls: list[ToolCall] = []
    for item in response.output:
        if item.type == "message":
            for part in item.content or ():
                if part.type == "output_text" and part.text is not None:
                    texts.append(part.text)
                elif part.type == "refusal" and part.refusal is not None:
                    refusals.append(part.refusal)
        elif item.type == "function_call":
            calls.append(
                ToolCall(
                    id=item.call_id or item.id or f"call_{call.request_id}_{len(calls)}",
                    function=FunctionCall(name=item.name or "", arguments=item.arguments or ""),
                )
            )
        elif item.type == "reasoning":
            parts = item.summary or item.content or ()
            reasoning.extend(p.text for p in parts if p.text)
    message = answer_message(texts, reasoning, calls)
    if refusals:
        message.refusal = "".join(refusals)
    if response.status == "incomplete":
        details = response.incomplete_details
        reason = INCOMPLETE_REASONS.get((details.reason if details else None) or "", "length")
    else:
        reason = "stop"
    usage = chat_usage(response.usage) if response.usage is not None else None
    created = int(response.created_at) if response.created_at is not None else None
    completion = one_choice(
        call,
        message,
        chat_finish(reason, bool(calls)),
        usage,
        id=response.id,
        model=response.model,
        created=created,
    )
    if response.service_tier is not None:
        completion.service_tier = response.service_tier
    return completion, usage


def responses_unary_result(call: UpstreamCall, body: bytes) -> UnaryResult:
    """The adapter's `unary_result` for `api: responses`: for a Responses client (native)
    the upstream's bytes unchanged, otherwise the answer converted to `chat.completion`."""
    if call.native is not None:
        # only the head is read: the output items go to the client as they are
        try:
            head = response_head_decoder.decode(body)
        except DECODE_ERRORS as exc:
            raise UpstreamProtocolError(f"upstream sent a malformed response: {exc}") from None
        if head.status == "failed":
            raise failure(head.error, "the upstream response failed")
        usage = chat_usage(head.usage) if head.usage is not None else None
        return UnaryResult(body=body, usage=usage, model=head.model or call.model, api="responses")
    completion, usage = completion_from_response(call, body)
    return UnaryResult(body=encoder.encode(completion), usage=usage, model=completion.model)
