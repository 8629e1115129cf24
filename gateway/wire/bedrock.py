"""Bedrock Converse / ConverseStream wire types: the request the gateway sends, the answer,
the stream event payloads and the error body.

Pure data: msgspec Structs and module-level encoders/decoders. No IO.

Field names are Bedrock's camelCase (`rename="camel"`). A content block is a union keyed by
member name (`{"text": ...}`, `{"toolUse": ...}`), so it is one Struct whose unset members
are not encoded. The upstream types are lenient: every field optional, unknown fields (the
random `p` padding of stream payloads included) skipped. A stream payload is decoded into
one flat `StreamEvent`; the frame's `:event-type` header says which members matter.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import Raw
from msgspec import Struct
from msgspec import UnsetType

# --- request ---------------------------------------------------------------------------------


class ImageSource(Struct, omit_defaults=True, gc=False):
    bytes: str  # base64


class Image(Struct, omit_defaults=True, gc=False):
    format: str  # png | jpeg | gif | webp
    source: ImageSource


class ToolUse(Struct, rename="camel", omit_defaults=True, gc=False):
    tool_use_id: str
    name: str
    input: dict[str, Any]


class ToolResultContent(Struct, omit_defaults=True, gc=False):
    text: str | UnsetType = UNSET
    json: Any | UnsetType = UNSET
    image: Image | UnsetType = UNSET


class ToolResult(Struct, rename="camel", omit_defaults=True, gc=False):
    tool_use_id: str
    content: list[ToolResultContent]
    status: str | UnsetType = UNSET  # success | error


class ContentBlock(Struct, rename="camel", omit_defaults=True, gc=False):
    text: str | UnsetType = UNSET
    image: Image | UnsetType = UNSET
    tool_use: ToolUse | UnsetType = UNSET
    tool_result: ToolResult | UnsetType = UNSET


class SystemBlock(Struct, gc=False):
    text: str


class Message(Struct, gc=False):
    role: str  # user | assistant
    content: list[ContentBlock]


class InputSchema(Struct, gc=False):
    json: dict[str, Any]


class ToolSpec(Struct, rename="camel", omit_defaults=True, gc=False):
    name: str
    input_schema: InputSchema
    description: str | UnsetType = UNSET


class ToolDef(Struct, rename="camel", gc=False):
    tool_spec: ToolSpec


class SpecificTool(Struct, gc=False):
    name: str


class ToolChoice(Struct, omit_defaults=True, gc=False):
    auto: dict[str, Any] | UnsetType = UNSET
    any: dict[str, Any] | UnsetType = UNSET
    tool: SpecificTool | UnsetType = UNSET


class ToolConfig(Struct, rename="camel", omit_defaults=True, gc=False):
    tools: list[ToolDef]
    tool_choice: ToolChoice | UnsetType = UNSET


class InferenceConfig(Struct, rename="camel", omit_defaults=True, gc=False):
    max_tokens: int | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET


class ConverseRequest(Struct, rename="camel", omit_defaults=True, gc=False):
    """The body of `/converse` and `/converse-stream` (the model id is in the URL)."""

    messages: list[Message]
    system: list[SystemBlock] | UnsetType = UNSET
    inference_config: InferenceConfig | UnsetType = UNSET
    tool_config: ToolConfig | UnsetType = UNSET


# --- answer and stream payloads --------------------------------------------------------------


class TokenUsage(Struct, rename="camel", gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    total_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_write_input_tokens: int | None = None


class ReasoningText(Struct, gc=False):
    text: str | None = None


class ReasoningContent(Struct, rename="camel", gc=False):
    reasoning_text: ReasoningText | None = None  # the answer's shape
    text: str | None = None  # the stream delta's shape


class ToolUseOut(Struct, rename="camel", gc=False):
    tool_use_id: str | None = None
    name: str | None = None
    type: str | None = None  # "server_tool_use" for Bedrock's own tools
    input: Raw = Raw(b"")  # an object in the answer, a string fragment in a delta; b"" absent


class OutBlock(Struct, rename="camel", gc=False):
    text: str | None = None
    tool_use: ToolUseOut | None = None
    reasoning_content: ReasoningContent | None = None


class OutMessage(Struct, gc=False):
    role: str | None = None
    content: list[OutBlock] = msgspec.field(default_factory=list)


class Output(Struct, gc=False):
    message: OutMessage | None = None


class ConverseResponse(Struct, rename="camel", gc=False):
    output: Output | None = None
    stop_reason: str | None = None
    usage: TokenUsage | None = None


class StreamEvent(Struct, rename="camel", gc=False):
    """Any ConverseStream event payload (messageStart, contentBlockStart/Delta/Stop,
    messageStop, metadata), or an exception frame's `{"message": ...}`."""

    role: str | None = None
    content_block_index: int | None = None
    start: OutBlock | None = None
    delta: OutBlock | None = None
    stop_reason: str | None = None
    usage: TokenUsage | None = None
    message: str | None = None


class ErrorBody(Struct, gc=False):
    message: str | None = None
    Message: str | None = None  # some AWS front ends capitalise it


encoder = msgspec.json.Encoder()
event_decoder = msgspec.json.Decoder(StreamEvent)
response_decoder = msgspec.json.Decoder(ConverseResponse)
error_body_decoder = msgspec.json.Decoder(ErrorBody)
fragment_decoder = msgspec.json.Decoder(str)
