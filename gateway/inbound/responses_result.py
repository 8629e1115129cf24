"""A finished Responses answer: built whole from a canonical message, or read from a
native upstream's own answer, and what the gateway keeps of it for the next turn (sans-IO).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from gateway.errors import UpstreamProtocolError
from gateway.inbound.responses_events import FunctionCallItem
from gateway.inbound.responses_events import IncompleteDetails
from gateway.inbound.responses_events import MessageItem
from gateway.inbound.responses_events import OutputItem
from gateway.inbound.responses_events import OutputText
from gateway.inbound.responses_events import ReasoningItem
from gateway.inbound.responses_events import ReasoningText
from gateway.inbound.responses_events import RefusalPart
from gateway.inbound.responses_events import ResponseObject
from gateway.wire import DECODE_ERRORS
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import ResponseMessage

INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}
completion_decoder = msgspec.json.Decoder(ChatCompletion)


class Finished(msgspec.Struct, gc=False):
    """A response that completed or ended incomplete: what is stored for the next turn."""

    id: str
    output: list[dict[str, Any]]
    status: str = "completed"


def finished_of(response: ResponseObject) -> Finished:
    return Finished(response.id, msgspec.to_builtins(response.output), response.status)


def status_of(finish: str | None) -> tuple[str, IncompleteDetails | None]:
    """The response status (and why it is incomplete) for a chat finish_reason."""
    reason = INCOMPLETE_REASONS.get(finish or "")
    if reason is None:
        return "completed", None
    return "incomplete", IncompleteDetails(reason=reason)


def output_of(
    message: ResponseMessage, item_status: str, new_id: Callable[[str], str]
) -> list[OutputItem]:
    """A whole chat message as output items: reasoning, then the message (text and refusal;
    an empty message when there is nothing else), then one item per tool call. `new_id`
    makes the id of an item from its prefix (rs, msg, fc)."""
    output: list[OutputItem] = []
    if isinstance(message.reasoning_content, str) and message.reasoning_content:
        output.append(
            ReasoningItem(new_id("rs"), item_status, [ReasoningText(message.reasoning_content)])
        )
    parts: list[OutputText | RefusalPart] = []
    if message.content is not None:
        parts.append(OutputText(message.content))
    if isinstance(message.refusal, str):
        parts.append(RefusalPart(message.refusal))
    if parts or not message.tool_calls:
        output.append(MessageItem(new_id("msg"), item_status, parts or [OutputText("")]))
    for call in message.tool_calls or ():
        fn = call.function
        output.append(FunctionCallItem(new_id("fc"), item_status, fn.arguments, call.id, fn.name))
    return output


# --- native upstream answers ----------------------------------------------------------------


class UpstreamResponse(msgspec.Struct, gc=False):
    """What the gateway reads of an upstream's own `response` object."""

    id: str
    status: str = ""
    output: list[dict[str, Any]] = msgspec.field(default_factory=list)

    def kept(self) -> Finished | None:
        if self.status in ("completed", "incomplete"):
            return Finished(self.id, self.output, self.status)
        return None


class _UpstreamEvent(msgspec.Struct, gc=False):
    response: UpstreamResponse


_event_decoder = msgspec.json.Decoder(_UpstreamEvent)
_response_decoder = msgspec.json.Decoder(UpstreamResponse)
_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


def upstream_response(data: bytes, *, in_event: bool) -> UpstreamResponse:
    """The response of an upstream lifecycle event's data (`in_event`), or of a whole
    non-streaming answer."""
    try:
        if in_event:
            return _event_decoder.decode(data).response
        return _response_decoder.decode(data)
    except DECODE_ERRORS as exc:  # ValidationError included
        raise UpstreamProtocolError(f"a malformed Responses answer: {exc}") from None


def response_json(event_data: bytes) -> bytes:
    """The `response` object of a lifecycle event, as the upstream's own bytes."""
    return bytes(_fields_decoder.decode(event_data)["response"])
