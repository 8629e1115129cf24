"""Anthropic Messages API wire types: the request the gateway sends, the stream events and
the message it reads back, and the error body.

Pure data: msgspec Structs and module-level encoders/decoders. No IO.

The request types are what the gateway builds, so optional fields default to `UNSET` and
are never encoded unless set. The upstream types are lenient: one Struct per shape with
every field optional and unknown fields skipped, because Anthropic adds block types, delta
types and usage fields over time and the stream must never fail on one it does not know.
Stream events are decoded into one flat `StreamEvent` (the `type` field says which it is)
rather than a tagged union, so an unknown event type is data to ignore, not a decode error.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import Raw
from msgspec import Struct
from msgspec import UnsetType

from gateway.wire.openai_chat import Tool

ANTHROPIC_VERSION = "2023-06-01"

# --- request ---------------------------------------------------------------------------------


class TextBlock(Struct, tag="text", tag_field="type", gc=False):
    text: str
    cache_control: dict[str, Any] | UnsetType = UNSET


class ImageSource(Struct, gc=False):
    type: str  # "url" | "base64"
    url: str | UnsetType = UNSET
    media_type: str | UnsetType = UNSET
    data: str | UnsetType = UNSET


class ImageBlock(Struct, tag="image", tag_field="type", gc=False):
    source: ImageSource
    cache_control: dict[str, Any] | UnsetType = UNSET


class ToolUseBlock(Struct, tag="tool_use", tag_field="type", gc=False):
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(Struct, tag="tool_result", tag_field="type", gc=False):
    tool_use_id: str
    content: str | list[TextBlock | ImageBlock] | UnsetType = UNSET  # absent: empty result


Block = TextBlock | ImageBlock | ToolUseBlock | ToolResultBlock


class MessageParam(Struct, gc=False):
    role: str  # "user" | "assistant"
    content: list[Block]


class ToolParam(Struct, gc=False):
    name: str
    input_schema: dict[str, Any]
    description: str | UnsetType = UNSET
    cache_control: dict[str, Any] | UnsetType = UNSET


class ToolChoice(Struct, gc=False):
    type: str  # "auto" | "any" | "tool" | "none"
    name: str | UnsetType = UNSET
    disable_parallel_tool_use: bool | UnsetType = UNSET


class Thinking(Struct, gc=False):
    budget_tokens: int
    type: str = "enabled"


class Metadata(Struct, gc=False):
    user_id: str


class MessagesRequest(Struct, gc=False):
    """The body of `POST /v1/messages` as the gateway builds it."""

    model: str
    max_tokens: int
    messages: list[MessageParam]
    system: list[TextBlock] | UnsetType = UNSET
    stream: bool | UnsetType = UNSET
    tools: list[ToolParam] | UnsetType = UNSET
    tool_choice: ToolChoice | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    thinking: Thinking | UnsetType = UNSET
    metadata: Metadata | UnsetType = UNSET


# --- inbound: what a client sends to the gateway's own /v1/messages ------------------------


class InboundMessage(Struct, gc=False):
    """One turn; the blocks stay dicts so the translator can name the path of a bad one."""

    role: str
    content: str | list[dict[str, Any]]


class InboundRequest(Struct, gc=False):
    """The body of a client's `POST /v1/messages` (or `/count_tokens`), typed where the
    gateway reads it; unknown top-level fields are ignored (docs/api-messages.md)."""

    model: str
    messages: list[InboundMessage]
    max_tokens: int | UnsetType | None = UNSET  # required for /v1/messages: checked by hand
    system: str | list[dict[str, Any]] | UnsetType | None = UNSET
    stop_sequences: list[str] | UnsetType | None = UNSET
    stream: bool | UnsetType | None = UNSET
    temperature: float | UnsetType | None = UNSET
    top_p: float | UnsetType | None = UNSET
    top_k: int | UnsetType | None = UNSET
    tools: list[dict[str, Any]] | UnsetType | None = UNSET
    tool_choice: dict[str, Any] | UnsetType | None = UNSET
    thinking: dict[str, Any] | UnsetType | None = UNSET
    metadata: dict[str, Any] | UnsetType | None = UNSET
    mcp_servers: list[Any] | UnsetType | None = UNSET
    container: Any = UNSET


class CacheControlledTool(Tool, gc=False):
    """A canonical function tool that carries an Anthropic client's `cache_control`, which
    only the Anthropic adapter reads (the OpenAI-compatible body never holds it)."""

    cache_control: dict[str, Any] | UnsetType = UNSET


class OutUsage(Struct, gc=False):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int | UnsetType = UNSET


class OutMessage(Struct, gc=False):
    """The `message` object the gateway answers with (and the skeleton of `message_start`)."""

    id: str
    model: str
    content: list[dict[str, Any]]
    usage: OutUsage
    stop_reason: str | None = None
    stop_sequence: str | None = None
    type: str = "message"
    role: str = "assistant"


class MessageStart(Struct, tag="message_start", tag_field="type", gc=False):
    message: OutMessage


# --- upstream: usage, content, message, stream events, errors -----------------------------------


class AnthropicUsage(Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class ContentBlock(Struct, gc=False):
    """Any content block of an answer (text, thinking, tool_use, server_tool_use, ...)."""

    type: str = ""
    text: str | None = None
    thinking: str | None = None
    id: str | None = None
    name: str | None = None
    input: Raw | UnsetType = UNSET  # the upstream's JSON bytes, kept as sent


class AnthropicMessage(Struct, gc=False):
    """A whole (non-streaming) answer, or the skeleton of one in `message_start`."""

    id: str = ""
    model: str = ""
    role: str = "assistant"
    content: list[ContentBlock] = msgspec.field(default_factory=list)
    stop_reason: str | None = None
    usage: AnthropicUsage | None = None


class StreamDelta(Struct, gc=False):
    """The `delta` of a content_block_delta (by its type) or of a message_delta."""

    type: str = ""
    text: str | None = None
    partial_json: str | None = None
    thinking: str | None = None
    stop_reason: str | None = None


class ErrorInfo(Struct, gc=False):
    type: str = ""
    message: str = ""


class StreamEvent(Struct, gc=False):
    """Every stream event, flattened; `type` says which fields mean something."""

    type: str = ""
    index: int | None = None
    message: AnthropicMessage | None = None
    content_block: ContentBlock | None = None
    delta: StreamDelta | None = None
    usage: AnthropicUsage | None = None
    error: ErrorInfo | None = None


class ErrorBody(Struct, gc=False):
    """`{"type": "error", "error": {"type": ..., "message": ...}, "request_id": ...}`"""

    error: ErrorInfo
    type: str = "error"


event_decoder = msgspec.json.Decoder(StreamEvent)
message_decoder = msgspec.json.Decoder(AnthropicMessage)
error_body_decoder = msgspec.json.Decoder(ErrorBody)
encoder = msgspec.json.Encoder()

__all__ = [
    "ANTHROPIC_VERSION",
    "AnthropicMessage",
    "AnthropicUsage",
    "Block",
    "CacheControlledTool",
    "ContentBlock",
    "ErrorBody",
    "ErrorInfo",
    "ImageBlock",
    "ImageSource",
    "InboundMessage",
    "InboundRequest",
    "MessageParam",
    "MessageStart",
    "MessagesRequest",
    "Metadata",
    "OutMessage",
    "OutUsage",
    "StreamDelta",
    "StreamEvent",
    "TextBlock",
    "Thinking",
    "ToolChoice",
    "ToolParam",
    "ToolResultBlock",
    "ToolUseBlock",
]
