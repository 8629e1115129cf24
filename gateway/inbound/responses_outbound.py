"""Canonical chunks out as the OpenAI Responses API: streaming events or one `response`.

Sans-IO: chunks in, bytes out; the clock is passed in. One `ResponsesOutbound` per request.

Translated attempts: every canonical chunk becomes Responses events. Reasoning text opens a
`reasoning` item (content part `reasoning_text`), text and refusals a `message` item
(parts `output_text`, `refusal`), each tool call a `function_call` item. A message or
reasoning item closes when an item of another kind starts; function calls stay open until
the end, because parallel calls may interleave their argument deltas: each delta goes to
the item of its tool-call index (the accumulator's identity), never to the latest item.

Native attempts (`start_attempt(native=True)`: the upstream speaks Responses too): every
upstream frame leaves as it came; the upstream's terminal event is read to keep the
response for `previous_response_id` and held back to leave as the stream's tail.

After a response completes (or ends incomplete), `finished` holds its id and output items,
and `settle` (when an `on_finished` was given) hands them on, before the client sees the
end: a client that continues at once finds its response stored.
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

from msgspec import UNSET
from msgspec.structs import replace

from gateway.errors import GatewayError
from gateway.errors import UpstreamProtocolError
from gateway.framing.sse import SSEEvent
from gateway.framing.sse import encode_comment
from gateway.framing.sse import encode_event
from gateway.inbound.responses_events import ArgumentsDeltaEvent
from gateway.inbound.responses_events import ArgumentsDoneEvent
from gateway.inbound.responses_events import DeltaEvent
from gateway.inbound.responses_events import Event
from gateway.inbound.responses_events import FunctionCallItem
from gateway.inbound.responses_events import ItemEvent
from gateway.inbound.responses_events import LifecycleEvent
from gateway.inbound.responses_events import OutputItem
from gateway.inbound.responses_events import PartEvent
from gateway.inbound.responses_events import RefusalDoneEvent
from gateway.inbound.responses_events import ResponseError
from gateway.inbound.responses_events import ResponseObject
from gateway.inbound.responses_events import TextDoneEvent
from gateway.inbound.responses_events import encoder
from gateway.inbound.responses_events import part_of
from gateway.inbound.responses_events import response_usage
from gateway.inbound.responses_events import sse
from gateway.inbound.responses_items import OpenItem
from gateway.inbound.responses_items import item_of
from gateway.inbound.responses_result import Finished
from gateway.inbound.responses_result import completion_decoder
from gateway.inbound.responses_result import finished_of
from gateway.inbound.responses_result import output_of
from gateway.inbound.responses_result import response_json
from gateway.inbound.responses_result import status_of
from gateway.inbound.responses_result import upstream_response
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ResponseMessage
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage

KEEPALIVE = encode_comment("keep-alive")
TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ResponsesOutbound:
    """Responses events (or one `response` object) for one request; `template` is its
    `in_progress` response object (id, model, echoed settings)."""

    keepalive = KEEPALIVE

    def __init__(
        self,
        template: ResponseObject,
        clock: Callable[[], float],
        on_finished: Callable[[Finished], Awaitable[None]] | None = None,
    ) -> None:
        self._template = template
        self._clock = clock
        self._on_finished = on_finished
        self.settle: Callable[[], Awaitable[None]] | None = (
            self._settle if on_finished is not None else None
        )
        self._suffix = template.id.removeprefix("resp_")
        self.passthrough = False
        self.finished: Finished | None = None
        self._reset()

    def _reset(self) -> None:
        self._seq = 0
        self._started = False
        self._items: dict[int, OutputItem] = {}  # closed items by output_index
        self._next_index = 0
        self._flow: OpenItem | None = None  # the open message or reasoning item
        self._calls: dict[int, OpenItem] = {}  # tool-call index -> its item
        self._upstream_id = ""
        self._frames = 0
        self._terminal: bytes | None = None  # the data of the upstream's terminal event
        self._held: bytes = b""  # that event as SSE, sent as the tail
        self.finished = None

    def start_attempt(self, native: bool, call: UpstreamCall | None = None) -> None:
        self._reset()
        self.passthrough = native

    # --- translated attempts ---------------------------------------------------------------

    def _emit(self, out: list[bytes], event: Event) -> None:
        out.append(sse(event))

    def _next(self) -> int:
        self._seq += 1
        return self._seq - 1

    def _start(self, out: list[bytes]) -> None:
        if self._started:
            return
        self._started = True
        for kind in ("response.created", "response.in_progress"):
            self._emit(out, LifecycleEvent(kind, self._next(), self._template))

    def chunk(self, chunk: ChatChunk, raw: bytes | None) -> bytes:
        out: list[bytes] = []
        self._start(out)
        for choice in chunk.choices:
            delta = choice.delta
            if delta.reasoning_content:
                self._text(out, "reasoning", "reasoning_text", delta.reasoning_content)
            if delta.content:
                self._text(out, "message", "output_text", delta.content)
            if delta.refusal:
                self._text(out, "message", "refusal", delta.refusal)
            if delta.tool_calls:
                for call in delta.tool_calls:
                    self._tool_delta(out, call)
        return b"".join(out)

    def _new_item(self, kind: str, prefix: str) -> OpenItem:
        index = self._next_index
        self._next_index += 1
        return OpenItem(kind, f"{prefix}_{self._suffix}_{index}", index)

    def _text(self, out: list[bytes], kind: str, part: str, text: str) -> None:
        item = self._flow
        if item is None or item.kind != kind:
            self._close_flow(out, "completed")
            item = self._flow = self._new_item(kind, "msg" if kind == "message" else "rs")
            self._emit(
                out,
                ItemEvent(
                    "response.output_item.added",
                    self._next(),
                    item.output_index,
                    item_of(item, "in_progress"),
                ),
            )
        if not item.parts or item.parts[-1][0] != part:
            self._close_part(out, item)
            item.parts.append((part, []))
            self._emit(
                out,
                PartEvent(
                    "response.content_part.added",
                    self._next(),
                    item.id,
                    item.output_index,
                    len(item.parts) - 1,
                    part_of(part, ""),
                ),
            )
        item.parts[-1][1].append(text)
        kind_name = "output_text" if part == "output_text" else part
        self._emit(
            out,
            DeltaEvent(
                f"response.{kind_name}.delta",
                self._next(),
                item.id,
                item.output_index,
                len(item.parts) - 1,
                text,
                [] if part == "output_text" else UNSET,
            ),
        )

    def _close_part(self, out: list[bytes], item: OpenItem) -> None:
        if not item.parts:
            return
        part, pieces = item.parts[-1]
        text, index = "".join(pieces), len(item.parts) - 1
        seq, at = self._next(), (item.id, item.output_index, index)
        if part == "refusal":
            self._emit(out, RefusalDoneEvent("response.refusal.done", seq, *at, text))
        else:
            logprobs: list[Any] | Any = [] if part == "output_text" else UNSET
            self._emit(out, TextDoneEvent(f"response.{part}.done", seq, *at, text, logprobs))
        self._emit(
            out, PartEvent("response.content_part.done", self._next(), *at, part_of(part, text))
        )

    def _close_flow(self, out: list[bytes], status: str) -> None:
        item = self._flow
        if item is None:
            return
        self._flow = None
        self._close_part(out, item)
        self._close_item(out, item, status)

    def _close_item(self, out: list[bytes], item: OpenItem, status: str) -> None:
        done = item_of(item, status)
        if isinstance(done, FunctionCallItem):
            self._emit(
                out,
                ArgumentsDoneEvent(
                    "response.function_call_arguments.done",
                    self._next(),
                    item.id,
                    item.output_index,
                    done.name,
                    done.arguments,
                ),
            )
        self._items[item.output_index] = done
        self._emit(
            out, ItemEvent("response.output_item.done", self._next(), item.output_index, done)
        )

    def _tool_delta(self, out: list[bytes], delta: ToolCallDelta) -> None:
        index = delta.index
        if not isinstance(index, int):  # the accumulator numbers every call it forwards
            raise UpstreamProtocolError("a tool-call delta without an index", retryable=True)
        fn = delta.function
        name = fn.name if fn is not UNSET and isinstance(fn.name, str) else ""
        args = fn.arguments if fn is not UNSET and isinstance(fn.arguments, str) else ""
        item = self._calls.get(index)
        if item is None:
            self._close_flow(out, "completed")
            item = self._calls[index] = self._new_item("function_call", "fc")
            item.call_id = delta.id if isinstance(delta.id, str) else f"call_{self._suffix}_{index}"
            item.name = name
            item.parts.append(("arguments", []))
            self._emit(
                out,
                ItemEvent(
                    "response.output_item.added",
                    self._next(),
                    item.output_index,
                    item_of(item, "in_progress"),
                ),
            )
        elif name and not item.name:
            item.name = name  # some servers name a call after its id
        if args:
            item.parts[0][1].append(args)
            self._emit(
                out,
                ArgumentsDeltaEvent(
                    "response.function_call_arguments.delta",
                    self._next(),
                    item.id,
                    item.output_index,
                    args,
                ),
            )

    def _output(self) -> list[OutputItem]:
        return [self._items[i] for i in sorted(self._items)]

    def end(self, acc: StreamAccumulator, usage_raw: bytes | None) -> bytes:
        """The tail of a complete stream: open items closed, then `response.completed` (or
        `response.incomplete` after a length or content-filter finish)."""
        if self.passthrough:
            held, self._held = self._held, b""
            return held  # the upstream's own terminal event
        out: list[bytes] = []
        self._start(out)
        state = acc.choices.get(0)
        status, details = status_of(state.finish_reason if state else None)
        item_status = "completed" if status == "completed" else "incomplete"
        open_items = [*self._calls.values()]
        if self._flow is not None:
            open_items.append(self._flow)
        for item in sorted(open_items, key=lambda i: i.output_index):
            if item is self._flow:
                self._close_flow(out, item_status)
            else:
                self._close_item(out, item, item_status)
        if not self._items:  # an empty answer is an empty message, as chat's content ""
            self._text(out, "message", "output_text", "")
            self._close_flow(out, item_status)
        response = replace(
            self._template,
            status=status,
            incomplete_details=details,
            output=self._output(),
            usage=response_usage(acc.usage),
            completed_at=int(self._clock()),
        )
        self._emit(out, LifecycleEvent(f"response.{status}", self._next(), response))
        self.finished = finished_of(response)
        return b"".join(out)

    def error(self, err: GatewayError) -> bytes:
        """A failure after the commit point: `response.failed`, never a silent end."""
        failure = ResponseError(code=err.code or "server_error", message=err.message)
        # before any upstream frame went out, the gateway starts (and fails) the stream itself
        if self.passthrough and self._frames:
            if self._terminal is not None:
                held, self._held = self._held, b""
                return held  # the upstream's own terminal event (response.failed, say)
            response = replace(
                self._template,
                status="failed",
                error=failure,
                id=self._upstream_id or self._template.id,
            )
            return sse(LifecycleEvent("response.failed", self._frames, response))
        out: list[bytes] = []
        self._start(out)
        open_items = [*self._calls.values(), *([self._flow] if self._flow else [])]
        output = {**self._items, **{i.output_index: item_of(i, "incomplete") for i in open_items}}
        response = replace(
            self._template,
            status="failed",
            error=failure,
            output=[output[i] for i in sorted(output)],
        )
        self._emit(out, LifecycleEvent("response.failed", self._next(), response))
        return b"".join(out)

    # --- native attempts -------------------------------------------------------------------

    def frame(self, frame: SSEEvent) -> bytes:
        """One upstream Responses frame, forwarded as it came."""
        self._frames += 1
        name = frame.event
        if name == "response.created":
            self._upstream_id = upstream_response(frame.data, in_event=True).id
        elif name in TERMINAL:
            self._terminal = frame.data
            self.finished = upstream_response(frame.data, in_event=True).kept()
            self._held = encode_event(frame.data, name)
            return b""  # leaves with the tail, after `settle`
        return encode_event(frame.data, name or None)

    async def _settle(self) -> None:
        if self.finished is not None and self._on_finished is not None:
            await self._on_finished(self.finished)

    # --- non-streaming ---------------------------------------------------------------------

    def completion(self, acc: StreamAccumulator, *, id: str, model: str, created: int) -> bytes:
        """The accumulated answer as one `response` object (the upstream's own, when the
        attempt was native)."""
        if self.passthrough and self._terminal is not None:
            return response_json(self._terminal)
        state = acc.choices.get(0)
        return self._whole(acc.message(), state.finish_reason if state else None, acc.usage)

    def unary(self, result: UnaryResult) -> bytes:
        if result.api == "responses":
            self.finished = upstream_response(result.body, in_event=False).kept()
            return result.body
        completion = completion_decoder.decode(result.body)
        choice = completion.choices[0] if completion.choices else None
        message = choice.message if choice else ResponseMessage(content="")
        usage = completion.usage if completion.usage is not UNSET else result.usage
        return self._whole(message, choice.finish_reason if choice else None, usage)

    def _whole(self, message: ResponseMessage, finish: str | None, usage: Usage | None) -> bytes:
        status, details = status_of(finish)
        item_status = "completed" if status == "completed" else "incomplete"
        response = replace(
            self._template,
            status=status,
            incomplete_details=details,
            output=output_of(message, item_status, lambda prefix: self._new_item("", prefix).id),
            usage=response_usage(usage),
            completed_at=int(self._clock()),
        )
        self.finished = finished_of(response)
        return encoder.encode(response)
