"""Canonical chunks out as the Anthropic Messages API: SSE events or one `message`.

Sans-IO: chunks in, bytes out. The rules Anthropic clients depend on:
- content blocks are numbered in the order they start, text, thinking and tool_use alike
  (a text block then two calls: 0, 1, 2), and a block is stopped before the next starts;
- so blocks cannot interleave, while an OpenAI upstream's parallel calls may: only the
  first unfinished block streams live; a block that appears while another is open waits,
  its deltas buffered in order, until the blocks before it are done. A text or thinking
  block is done when anything else follows it; a tool call only when the turn finishes (an
  upstream may still send its arguments), so with parallel calls the first streams live
  and the others leave whole at the finish;
- a tool call's block starts once its name is known (some servers send the name late).

Native attempts (`start_attempt(native=True)`: the upstream is Anthropic itself) pass every
upstream event through as it came (`messages_native.py`): the client then sees the
upstream's own message id, model id, thinking signatures and server-tool blocks, and the
gateway adds nothing but an `event: error` when the stream fails and the upstream did not
say so itself.
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

import msgspec

from gateway.errors import GatewayError
from gateway.errors import InternalError
from gateway.errors import UpstreamProtocolError
from gateway.framing.sse import SSEEvent
from gateway.inbound.messages_native import NativeEvents
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire import DECODE_ERRORS
from gateway.wire.anthropic import MessageStart
from gateway.wire.anthropic import OutMessage
from gateway.wire.anthropic import OutUsage
from gateway.wire.anthropic import encoder
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import ResponseMessage
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage

KEEPALIVE = b'event: ping\ndata: {"type": "ping"}\n\n'
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_TEXT, _THINKING, _TOOL = "text", "thinking", "tool_use"
_DELTA_FIELD = {_TEXT: b"text_delta", _THINKING: b"thinking_delta", _TOOL: b"input_json_delta"}
_DELTA_KEY = {_TEXT: b'"text":', _THINKING: b'"thinking":', _TOOL: b'"partial_json":'}
_completion_decoder = msgspec.json.Decoder(ChatCompletion)
_json_decode = msgspec.json.decode


def error_type(status: int) -> str:
    if status in ERROR_TYPES:
        return ERROR_TYPES[status]
    return "api_error" if status >= 500 else "invalid_request_error"


def error_json(err: GatewayError) -> bytes:
    """`{"type": "error", "error": {"type", "message"}}`; the field at fault leads the
    message (the shape has no `param`), as Anthropic's own messages do."""
    message = err.message
    if err.param and not message.startswith(err.param):
        message = f"{err.param}: {message}"
    detail = {"type": error_type(err.status), "message": message}
    return encoder.encode({"type": "error", "error": detail})


def stop_reason(finish_reason: str | None) -> str:
    return STOP_REASONS.get(finish_reason or "stop", "end_turn")


def anthropic_usage(usage: Usage | None) -> OutUsage:
    """Anthropic counts cache reads apart from `input_tokens`; chat usage includes them."""
    if usage is None:
        return OutUsage()
    details = usage.prompt_tokens_details
    cached = details.cached_tokens if details else None
    out = OutUsage(output_tokens=usage.completion_tokens)
    if isinstance(cached, int):
        out.cache_read_input_tokens = cached
        out.input_tokens = max(usage.prompt_tokens - cached, 0)
    else:
        out.input_tokens = usage.prompt_tokens
    return out


def _event(name: bytes, data: bytes) -> bytes:
    return b"event: " + name + b"\ndata: " + data + b"\n\n"


class _Block:
    __slots__ = ("id", "index", "kind", "name", "parts", "started", "stopped", "tool")

    def __init__(self, kind: str, tool: int = -1) -> None:
        self.kind = kind
        self.tool = tool  # the gateway's tool-call index, for tool_use blocks
        self.id = ""
        self.name = ""
        self.parts: list[str] = []  # deltas held until the block may start
        self.started = False
        self.stopped = False
        self.index = -1


class MessagesOutbound:
    """One Messages stream (or answer); `model` is the name the client asked for."""

    keepalive = KEEPALIVE
    settle: Callable[[], Awaitable[None]] | None = None  # nothing to settle

    def __init__(self, *, message_id: str, model: str) -> None:
        self.message_id = message_id
        self.model = model
        self.passthrough = False
        self._native = NativeEvents()
        self.start_attempt(False)

    def start_attempt(self, native: bool, call: UpstreamCall | None = None) -> None:
        self.passthrough = native
        self._native.reset()
        self._started = False
        self._next_index = 0
        self._queue: list[_Block] = []  # unstopped blocks, in start order; [0] may be open
        self._tools: dict[int, _Block] = {}
        self._finish: str | None = None

    def frame(self, frame: SSEEvent) -> bytes:
        """One upstream event of a native attempt, as the upstream sent it."""
        return self._native.forward(frame)

    # --- streaming -----------------------------------------------------------------------

    def chunk(self, chunk: ChatChunk, raw: bytes | None) -> bytes:
        out: list[bytes] = []
        if not self._started:
            out.append(self._message_start())
        for choice in chunk.choices:
            delta = choice.delta
            if delta.reasoning_content:
                self._text(_THINKING, delta.reasoning_content, out)
            if delta.content:
                self._text(_TEXT, delta.content, out)
            if delta.refusal:
                self._text(_TEXT, delta.refusal, out)
            if delta.tool_calls:
                for call in delta.tool_calls:
                    self._tool_delta(call, out)
            reason = choice.finish_reason
            if reason is not UNSET and reason is not None and self._finish is None:
                self._finish = reason
                self._drain(out)
        return b"".join(out)

    def end(self, acc: StreamAccumulator, usage_raw: bytes | None) -> bytes:
        if self.passthrough:
            return b""  # the upstream's own message_delta and message_stop went out
        out: list[bytes] = []
        if not self._started:
            out.append(self._message_start())
        for missing in acc.finish_missing():
            if self._finish is None and isinstance(missing.finish_reason, str):
                self._finish = missing.finish_reason
        self._drain(out)
        usage = encoder.encode(anthropic_usage(acc.usage))
        stop = encoder.encode(stop_reason(self._finish))
        out.append(
            _event(
                b"message_delta",
                b'{"type":"message_delta","delta":{"stop_reason":'
                + stop
                + b',"stop_sequence":null},"usage":'
                + usage
                + b"}",
            )
        )
        out.append(_event(b"message_stop", b'{"type":"message_stop"}'))
        return b"".join(out)

    def error(self, err: GatewayError) -> bytes:
        if self.passthrough and self._native.error_sent:
            return b""  # the upstream's own `event: error` is already the stream's last word
        return _event(b"error", error_json(err))

    def _message_start(self) -> bytes:
        self._started = True
        message = OutMessage(id=self.message_id, model=self.model, content=[], usage=OutUsage())
        return _event(b"message_start", encoder.encode(MessageStart(message=message)))

    def _text(self, kind: str, text: str, out: list[bytes]) -> None:
        queue = self._queue
        if queue and queue[-1].kind == kind:
            self._add(queue[-1], text, out)
            return
        block = _Block(kind)
        block.parts.append(text)
        queue.append(block)
        self._advance(out)

    def _tool_delta(self, call: ToolCallDelta, out: list[bytes]) -> None:
        index = call.index if isinstance(call.index, int) else 0
        block = self._tools.get(index)
        fn = call.function
        arguments = fn.arguments if fn is not UNSET and fn.arguments is not UNSET else ""
        if block is None:
            block = self._tools[index] = _Block(_TOOL, index)
            self._queue.append(block)
        elif block.stopped:
            raise UpstreamProtocolError("tool-call arguments arrived after the turn finished")
        if isinstance(call.id, str) and call.id and not block.id:
            block.id = call.id
        if fn is not UNSET and isinstance(fn.name, str) and fn.name and not block.name:
            block.name = fn.name
        if arguments:
            self._add(block, arguments, out)
        self._advance(out)

    def _add(self, block: _Block, text: str, out: list[bytes]) -> None:
        if block.started:
            out.append(self._delta(block, text))
        else:
            block.parts.append(text)

    def _advance(self, out: list[bytes]) -> None:
        """Start the head block if it may start; stop text and thinking blocks that have a
        successor (they cannot grow again: more text after it is a new block)."""
        queue = self._queue
        while queue:
            head = queue[0]
            if not head.started:
                if head.kind == _TOOL and not head.name:
                    return
                self._start(head, out)
            if head.kind == _TOOL or len(queue) == 1:
                return
            self._stop(queue.pop(0), out)

    def _drain(self, out: list[bytes]) -> None:
        """The turn is over: every block, started or waiting, leaves whole, in order."""
        queue, self._queue = self._queue, []
        for block in queue:
            if not block.started:
                self._start(block, out)
            self._stop(block, out)

    def _start(self, block: _Block, out: list[bytes]) -> None:
        block.started = True
        block.index = self._next_index
        self._next_index += 1
        if block.kind == _TOOL:
            content = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
        elif block.kind == _THINKING:
            content = {"type": "thinking", "thinking": "", "signature": ""}
        else:
            content = {"type": "text", "text": ""}
        start = {"type": "content_block_start", "index": block.index, "content_block": content}
        out.append(_event(b"content_block_start", encoder.encode(start)))
        parts, block.parts = block.parts, []
        out.extend(self._delta(block, part) for part in parts)

    def _delta(self, block: _Block, text: str) -> bytes:
        return _event(
            b"content_block_delta",
            b'{"type":"content_block_delta","index":%d,"delta":{"type":"%s",%s%s}}'
            % (block.index, _DELTA_FIELD[block.kind], _DELTA_KEY[block.kind], encoder.encode(text)),
        )

    def _stop(self, block: _Block, out: list[bytes]) -> None:
        block.stopped = True
        out.append(
            _event(
                b"content_block_stop",
                b'{"type":"content_block_stop","index":%d}' % block.index,
            )
        )

    # --- one whole message -------------------------------------------------------------

    def completion(self, acc: StreamAccumulator, *, id: str, model: str, created: int) -> bytes:
        if self.passthrough:
            # Anthropic answers non-streaming requests itself (`unary`), and a native request
            # is never sent with tool emulation, which is what streams for a unary client
            raise InternalError("a native Messages attempt was accumulated from a stream")
        choice = acc.choices.get(0)
        finish = choice.finish_reason if choice is not None else None
        return self._message(acc.message(0), finish, acc.usage)

    def unary(self, result: UnaryResult) -> bytes:
        if result.api == "messages":
            return result.body  # the upstream's own message, as it wrote it
        if result.api != "chat":
            raise AssertionError(f"a Messages request got a {result.api!r} answer")
        try:
            completion = _completion_decoder.decode(result.body)
        except DECODE_ERRORS as exc:
            raise UpstreamProtocolError(f"upstream sent a malformed completion: {exc}") from None
        usage = completion.usage if completion.usage is not UNSET else result.usage
        if not completion.choices:
            return self._message(ResponseMessage(content=""), "stop", usage)
        first = completion.choices[0]
        return self._message(first.message, first.finish_reason, usage)

    def _message(self, message: ResponseMessage, finish: str | None, usage: Usage | None) -> bytes:
        content: list[dict[str, Any]] = []
        if isinstance(message.reasoning_content, str) and message.reasoning_content:
            thinking = message.reasoning_content
            content.append({"type": "thinking", "thinking": thinking, "signature": ""})
        text = (message.content or "") + (message.refusal or "")
        if text:
            content.append({"type": "text", "text": text})
        content.extend(
            {
                "type": "tool_use",
                "id": call.id,
                "name": call.function.name,
                "input": _arguments(call.function.arguments),
            }
            for call in message.tool_calls or []
        )
        body = OutMessage(
            id=self.message_id,
            model=self.model,
            content=content,
            usage=anthropic_usage(usage),
            stop_reason=stop_reason(finish),
        )
        return encoder.encode(body)


def _arguments(arguments: str) -> dict[str, Any]:
    if not arguments.strip():
        return {}
    try:
        value = _json_decode(arguments)
    except DECODE_ERRORS:
        value = None
    if not isinstance(value, dict):
        raise UpstreamProtocolError("the upstream's tool-call arguments are not a JSON object")
    return value
