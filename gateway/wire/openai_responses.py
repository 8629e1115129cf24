"""OpenAI Responses API wire types, as the gateway reads them from an upstream.

Pure data: msgspec Structs and module-level decoders. No IO.

Lenient by design: the Responses API grows new event types, output item types and fields
often, so every Struct skips unknown fields, and only the fields the gateway acts on are
declared. A stream event is decoded with one Struct that covers every event the gateway
translates (`StreamEvent`); an event of a type added later whose fields do not fit it is
recognised by its `type` alone (`EventType`) and skipped, never an error.

Streaming events embed the whole `response` object in `response.created`, `.in_progress`,
`.completed`, `.incomplete` and `.failed`; `ResponseHead` reads only its head (id, model,
status, usage, error) so the output items repeated there are skipped, not decoded.

The request body the gateway sends is built as plain dicts (see
`providers/openai/responses_request.py`): it is written once per request, and dicts keep
absent, `null` and `""` apart without a Struct per request shape.
"""

from __future__ import annotations

import msgspec
from msgspec import Struct


class InputTokensDetails(Struct, gc=False):
    cached_tokens: int | None = None


class OutputTokensDetails(Struct, gc=False):
    reasoning_tokens: int | None = None


class ResponsesUsage(Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int | None = None
    input_tokens_details: InputTokensDetails | None = None
    output_tokens_details: OutputTokensDetails | None = None


class ResponseErrorInfo(Struct, gc=False):
    """`response.error` of a failed response."""

    code: str | int | None = None
    message: str = ""
    param: str | None = None
    type: str | None = None


class IncompleteDetails(Struct, gc=False):
    reason: str | None = None


class ContentPart(Struct, gc=False):
    """A part of a `message` item (`output_text`, `refusal`) or of a `reasoning` item's
    `content` / `summary` (`reasoning_text`, `summary_text`)."""

    type: str = ""
    text: str | None = None
    refusal: str | None = None


class OutputItem(Struct, gc=False):
    """One output item: `message`, `function_call`, `reasoning`, or a type the gateway
    does not translate (web_search_call, mcp_call, ...: skipped)."""

    type: str = ""
    id: str | None = None
    status: str | None = None
    role: str | None = None
    content: list[ContentPart] | None = None
    summary: list[ContentPart] | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class StreamItem(Struct, gc=False):
    """An output item as a stream's `output_item` events carry it: only what identifies a
    function call is read (the content of other items arrives in their delta events)."""

    type: str = ""
    id: str | None = None
    call_id: str | None = None
    name: str | None = None
    arguments: str | None = None


class ResponseHead(Struct, gc=False):
    """The parts of a `response` object a stream's lifecycle events carry that matter."""

    id: str = ""
    model: str = ""
    created_at: int | float | None = None
    status: str | None = None
    usage: ResponsesUsage | None = None
    error: ResponseErrorInfo | None = None
    incomplete_details: IncompleteDetails | None = None
    service_tier: str | None = None


class ResponseObject(Struct, gc=False):
    """A whole `response` object: the non-streaming answer."""

    id: str = ""
    object: str = "response"
    model: str = ""
    created_at: int | float | None = None
    status: str | None = None
    output: list[OutputItem] = msgspec.field(default_factory=list)
    usage: ResponsesUsage | None = None
    error: ResponseErrorInfo | None = None
    incomplete_details: IncompleteDetails | None = None
    service_tier: str | None = None


class StreamEvent(Struct, gc=False):
    """Any streaming event the gateway translates; fields unused by a type stay None.

    `error` events carry `code`, `message` and `param` at the top level; some servers nest
    them in `error` instead, so both are read.
    """

    type: str = ""
    sequence_number: int | None = None
    response: ResponseHead | None = None
    item: StreamItem | None = None
    output_index: int | None = None
    item_id: str | None = None
    content_index: int | None = None
    summary_index: int | None = None
    delta: str | None = None
    arguments: str | None = None
    name: str | None = None
    code: str | int | None = None
    message: str | None = None
    param: str | None = None
    error: ResponseErrorInfo | None = None


class EventType(Struct, gc=False):
    """Just an event's type: what is left to read of an event that fits no other Struct."""

    type: str = ""


event_decoder = msgspec.json.Decoder(StreamEvent)
event_type_decoder = msgspec.json.Decoder(EventType)
response_decoder = msgspec.json.Decoder(ResponseObject)
response_head_decoder = msgspec.json.Decoder(ResponseHead)

__all__ = [
    "ContentPart",
    "EventType",
    "IncompleteDetails",
    "InputTokensDetails",
    "OutputItem",
    "OutputTokensDetails",
    "ResponseErrorInfo",
    "ResponseHead",
    "ResponseObject",
    "ResponsesUsage",
    "StreamEvent",
    "StreamItem",
    "event_decoder",
    "event_type_decoder",
    "response_decoder",
    "response_head_decoder",
]
