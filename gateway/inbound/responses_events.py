"""What the gateway emits on `/v1/responses`: the response object, its output items and
the streaming events, as msgspec Structs with one module-level encoder (sans-IO).

Shapes follow OpenAI's recordings (tests/wire_fixtures/openai_responses_*.sse): every
SSE frame is `event: <type>` plus `data: {json with the same "type"}`, and every event
carries `sequence_number`, one counter per response starting at 0.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import Struct
from msgspec import UnsetType

from gateway.wire.openai_chat import Usage

# --- output items ----------------------------------------------------------------------------


class OutputText(Struct, gc=False, tag_field="type", tag="output_text"):
    text: str
    annotations: list[Any] = msgspec.field(default_factory=list)
    logprobs: list[Any] = msgspec.field(default_factory=list)


class RefusalPart(Struct, gc=False, tag_field="type", tag="refusal"):
    refusal: str


class ReasoningText(Struct, gc=False, tag_field="type", tag="reasoning_text"):
    text: str


Part = OutputText | RefusalPart | ReasoningText


def part_of(kind: str, text: str) -> Part:
    """A content part of type `kind` (output_text, refusal, reasoning_text) holding `text`."""
    if kind == "output_text":
        return OutputText(text)
    if kind == "refusal":
        return RefusalPart(text)
    return ReasoningText(text)


class MessageItem(Struct, gc=False, tag_field="type", tag="message"):
    id: str
    status: str
    content: list[OutputText | RefusalPart]
    role: str = "assistant"


class FunctionCallItem(Struct, gc=False, tag_field="type", tag="function_call"):
    id: str
    status: str
    arguments: str
    call_id: str
    name: str


class ReasoningItem(Struct, gc=False, tag_field="type", tag="reasoning"):
    id: str
    status: str
    content: list[ReasoningText]
    summary: list[Any] = msgspec.field(default_factory=list)


OutputItem = MessageItem | FunctionCallItem | ReasoningItem


# --- the response object -------------------------------------------------------------------


class InputTokensDetails(Struct, gc=False):
    cached_tokens: int = 0


class OutputTokensDetails(Struct, gc=False):
    reasoning_tokens: int = 0


class ResponseUsage(Struct, gc=False):
    input_tokens: int
    input_tokens_details: InputTokensDetails
    output_tokens: int
    output_tokens_details: OutputTokensDetails
    total_tokens: int


class ResponseError(Struct, gc=False):
    code: str
    message: str


class IncompleteDetails(Struct, gc=False):
    reason: str


class ResponseObject(Struct, gc=False, kw_only=True):
    """A `response` object. The request's settings are echoed as the client sent them
    (`Any`: the client's own JSON values), with OpenAI's defaults where it sent none."""

    id: str
    object: str = "response"
    created_at: int
    status: str
    background: bool = False
    completed_at: int | None = None
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: Any = None
    max_output_tokens: Any = None
    max_tool_calls: Any = None
    model: str
    output: list[OutputItem] = msgspec.field(default_factory=list)
    parallel_tool_calls: Any = True
    previous_response_id: Any = None
    prompt_cache_key: Any = None
    reasoning: Any = None
    safety_identifier: Any = None
    service_tier: Any = None
    store: Any = True
    temperature: Any = None
    text: Any = None
    tool_choice: Any = "auto"
    tools: Any = msgspec.field(default_factory=list)
    top_logprobs: Any = None
    top_p: Any = None
    truncation: Any = "disabled"
    usage: ResponseUsage | None = None
    user: Any = None
    metadata: Any = msgspec.field(default_factory=dict)


ECHOED = (
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt_cache_key",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "user",
    "metadata",
)
# a null the client sent for these means "the default", which the response states instead
DEFAULT_WHEN_NULL = frozenset({"parallel_tool_calls", "store", "tool_choice", "tools", "metadata"})


def response_template(
    body: dict[str, Any], *, id: str, model: str, created_at: int
) -> ResponseObject:
    """The `in_progress` response for a request `body`, its settings echoed."""
    echo = {
        field: body[field]
        for field in ECHOED
        if field in body and not (body[field] is None and field in DEFAULT_WHEN_NULL)
    }
    if "text" not in echo:
        echo["text"] = {"format": {"type": "text"}}
    if "reasoning" not in echo:
        echo["reasoning"] = {"effort": None, "summary": None}
    return ResponseObject(id=id, created_at=created_at, status="in_progress", model=model, **echo)


def response_usage(usage: Usage | None) -> ResponseUsage | None:
    """Canonical (chat) usage in the Responses shape."""
    if usage is None:
        return None
    cached = reasoning = 0
    prompt_details = usage.prompt_tokens_details
    if prompt_details and isinstance(prompt_details.cached_tokens, int):
        cached = prompt_details.cached_tokens
    completion_details = usage.completion_tokens_details
    if completion_details and isinstance(completion_details.reasoning_tokens, int):
        reasoning = completion_details.reasoning_tokens
    return ResponseUsage(
        input_tokens=usage.prompt_tokens,
        input_tokens_details=InputTokensDetails(cached_tokens=cached),
        output_tokens=usage.completion_tokens,
        output_tokens_details=OutputTokensDetails(reasoning_tokens=reasoning),
        total_tokens=usage.total_tokens,
    )


# --- streaming events ----------------------------------------------------------------------


class LifecycleEvent(Struct, gc=False):
    """response.created, .in_progress, .completed, .incomplete, .failed"""

    type: str
    sequence_number: int
    response: ResponseObject


class ItemEvent(Struct, gc=False):
    """response.output_item.added and .done"""

    type: str
    sequence_number: int
    output_index: int
    item: OutputItem


class PartEvent(Struct, gc=False):
    """response.content_part.added and .done"""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    part: Part


class DeltaEvent(Struct, gc=False):
    """response.output_text.delta (with logprobs), .refusal.delta, .reasoning_text.delta"""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    delta: str
    logprobs: list[Any] | UnsetType = UNSET


class TextDoneEvent(Struct, gc=False):
    """response.output_text.done and response.reasoning_text.done"""

    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    text: str
    logprobs: list[Any] | UnsetType = UNSET


class RefusalDoneEvent(Struct, gc=False):
    type: str
    sequence_number: int
    item_id: str
    output_index: int
    content_index: int
    refusal: str


class ArgumentsDeltaEvent(Struct, gc=False):
    type: str
    sequence_number: int
    item_id: str
    output_index: int
    delta: str


class ArgumentsDoneEvent(Struct, gc=False):
    type: str
    sequence_number: int
    item_id: str
    output_index: int
    name: str
    arguments: str


Event = (
    LifecycleEvent
    | ItemEvent
    | PartEvent
    | DeltaEvent
    | TextDoneEvent
    | RefusalDoneEvent
    | ArgumentsDeltaEvent
    | ArgumentsDoneEvent
)

encoder = msgspec.json.Encoder()


def sse(event: Event) -> bytes:
    return b"event: " + event.type.encode() + b"\ndata: " + encoder.encode(event) + b"\n\n"
