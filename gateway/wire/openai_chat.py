"""OpenAI Chat Completions wire types: request, response, stream chunk, usage, error.

Pure data: msgspec Structs and the module-level encoders/decoders built from them. No IO.

Every Struct is `gc=False`: they hold only strings, numbers, lists and other Structs, never a
reference back, so they cannot form cycles and need no garbage-collector tracking (cheaper to
allocate on the hot path).

Three rules shape these types:
- Absent, `null` and `""` are different values. Optional fields default to `UNSET` (never
  encoded), so what the gateway builds carries exactly the fields it set.
- Upstream types are lenient: unknown fields are skipped, never an error.
- The request Struct validates what the gateway reads; forwarding to an OpenAI-compatible
  upstream starts from the client's own JSON object, so fields this module does not know are
  forwarded untouched (see `providers/openai/adapter.py`).
"""

from __future__ import annotations

from typing import Any
from typing import Literal

import msgspec
from msgspec import UNSET
from msgspec import Raw
from msgspec import Struct
from msgspec import UnsetType

Role = Literal["system", "developer", "user", "assistant", "tool", "function"]


# --- request -------------------------------------------------------------------------------


class FunctionCall(Struct, gc=False):
    name: str
    arguments: str


class ToolCall(Struct, gc=False):
    id: str
    function: FunctionCall
    type: str = "function"


class Message(Struct, gc=False):
    role: Role
    content: str | list[dict[str, Any]] | UnsetType | None = UNSET
    name: str | UnsetType = UNSET
    tool_calls: list[ToolCall] | UnsetType | None = UNSET
    tool_call_id: str | UnsetType = UNSET
    refusal: str | UnsetType | None = UNSET
    reasoning_content: str | UnsetType | None = UNSET


class FunctionDefinition(Struct, gc=False):
    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET
    strict: bool | UnsetType | None = UNSET


class Tool(Struct, gc=False):
    type: str
    function: FunctionDefinition | UnsetType = UNSET


class StreamOptions(Struct, gc=False):
    include_usage: bool | UnsetType | None = UNSET
    include_obfuscation: bool | UnsetType | None = UNSET


class ChatRequest(Struct, gc=False):
    """What a client may send to /v1/chat/completions, typed for validation and reading."""

    model: str
    messages: list[Message]
    stream: bool | UnsetType | None = UNSET
    stream_options: StreamOptions | UnsetType | None = UNSET
    tools: list[Tool] | UnsetType | None = UNSET
    tool_choice: str | dict[str, Any] | UnsetType | None = UNSET
    parallel_tool_calls: bool | UnsetType | None = UNSET
    response_format: dict[str, Any] | UnsetType | None = UNSET
    n: int | UnsetType | None = UNSET
    logprobs: bool | UnsetType | None = UNSET
    top_logprobs: int | UnsetType | None = UNSET
    stop: str | list[str] | UnsetType | None = UNSET
    seed: int | UnsetType | None = UNSET
    user: str | UnsetType | None = UNSET
    metadata: dict[str, str] | UnsetType | None = UNSET
    max_tokens: int | UnsetType | None = UNSET
    max_completion_tokens: int | UnsetType | None = UNSET
    reasoning_effort: str | UnsetType | None = UNSET
    temperature: float | UnsetType | None = UNSET
    top_p: float | UnsetType | None = UNSET
    frequency_penalty: float | UnsetType | None = UNSET
    presence_penalty: float | UnsetType | None = UNSET
    logit_bias: dict[str, float] | UnsetType | None = UNSET
    modalities: list[str] | UnsetType | None = UNSET
    audio: dict[str, Any] | UnsetType | None = UNSET
    prediction: dict[str, Any] | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET
    store: bool | UnsetType | None = UNSET
    verbosity: str | UnsetType | None = UNSET
    web_search_options: dict[str, Any] | UnsetType | None = UNSET
    prompt_cache_key: str | UnsetType | None = UNSET
    safety_identifier: str | UnsetType | None = UNSET


# --- usage and errors --------------------------------------------------------------------


class PromptTokensDetails(Struct, gc=False):
    cached_tokens: int | UnsetType | None = UNSET
    audio_tokens: int | UnsetType | None = UNSET


class CompletionTokensDetails(Struct, gc=False):
    reasoning_tokens: int | UnsetType | None = UNSET
    audio_tokens: int | UnsetType | None = UNSET
    accepted_prediction_tokens: int | UnsetType | None = UNSET
    rejected_prediction_tokens: int | UnsetType | None = UNSET


class Usage(Struct, gc=False):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | UnsetType | None = UNSET
    completion_tokens_details: CompletionTokensDetails | UnsetType | None = UNSET


class ErrorDetail(Struct, gc=False):
    message: str = ""
    type: str | None = None
    param: str | None = None
    code: str | int | None = None


class ErrorBody(Struct, gc=False):
    error: ErrorDetail


# --- stream chunk --------------------------------------------------------------------------


class FunctionDelta(Struct, gc=False):
    name: str | UnsetType = UNSET
    arguments: str | UnsetType = UNSET


class ToolCallDelta(Struct, gc=False):
    index: int | UnsetType = UNSET
    id: str | UnsetType | None = UNSET
    type: str | UnsetType | None = UNSET
    function: FunctionDelta | UnsetType = UNSET


class Delta(Struct, gc=False):
    role: str | UnsetType | None = UNSET
    content: str | UnsetType | None = UNSET
    refusal: str | UnsetType | None = UNSET
    reasoning_content: str | UnsetType | None = UNSET
    tool_calls: list[ToolCallDelta] | UnsetType | None = UNSET


class ChunkChoice(Struct, gc=False):
    index: int = 0
    delta: Delta = msgspec.field(default_factory=Delta)
    logprobs: Raw | UnsetType = UNSET  # the upstream's bytes; `null` decodes as Raw(b"null")
    finish_reason: str | UnsetType | None = UNSET


class ChatChunk(Struct, gc=False):
    """One `chat.completion.chunk`: the canonical stream event every provider translates to.

    `error` is not part of a normal chunk: it is how an OpenAI-compatible upstream reports a
    failure inside a 200 stream (`data: {"error": {...}}`), so the decoder sees it here.
    """

    id: str = ""
    object: str = "chat.completion.chunk"
    created: int = 0
    model: str = ""
    choices: list[ChunkChoice] = msgspec.field(default_factory=list)
    system_fingerprint: str | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET
    usage: Usage | UnsetType | None = UNSET
    error: ErrorDetail | UnsetType = UNSET


# --- non-streaming response ------------------------------------------------------------------


class ResponseMessage(Struct, gc=False):
    role: str = "assistant"
    content: str | None = None
    refusal: str | UnsetType | None = UNSET
    reasoning_content: str | UnsetType | None = UNSET
    tool_calls: list[ToolCall] | UnsetType = UNSET


class Choice(Struct, gc=False):
    index: int
    message: ResponseMessage
    finish_reason: str | None
    logprobs: Raw = Raw(b"null")


class ChatCompletion(Struct, gc=False):
    id: str
    created: int
    model: str
    choices: list[Choice]
    object: str = "chat.completion"
    usage: Usage | UnsetType = UNSET
    system_fingerprint: str | UnsetType | None = UNSET
    service_tier: str | UnsetType | None = UNSET


class CallsOnly(Struct, gc=False):
    """A response message's tool calls, not looked into (any JSON: servers differ)."""

    tool_calls: Raw = Raw(b"null")


class FinishOnly(Struct, gc=False):
    """A choice of a non-streaming response: whether it called tools and why it ended."""

    message: CallsOnly | None = None
    finish_reason: Any = None


class CompletionUsage(Struct, gc=False):
    """Just the usage of a non-streaming response (and what its choices' finish needs),
    read without decoding the rest."""

    usage: Usage | UnsetType | None = UNSET
    model: str | UnsetType = UNSET
    choices: list[FinishOnly] = []


class ModelCard(Struct, gc=False):
    id: str
    owned_by: str
    object: str = "model"
    created: int = 0


class ModelList(Struct, gc=False):
    data: list[ModelCard]
    object: str = "list"


chunk_decoder = msgspec.json.Decoder(ChatChunk)
completion_usage_decoder = msgspec.json.Decoder(CompletionUsage)
error_body_decoder = msgspec.json.Decoder(ErrorBody)
encoder = msgspec.json.Encoder()

__all__ = [
    "UNSET",
    "ChatChunk",
    "ChatCompletion",
    "ChatRequest",
    "Choice",
    "ChunkChoice",
    "CompletionUsage",
    "Delta",
    "ErrorBody",
    "ErrorDetail",
    "FunctionCall",
    "FunctionDelta",
    "Message",
    "ModelCard",
    "ModelList",
    "ResponseMessage",
    "ToolCall",
    "ToolCallDelta",
    "Usage",
]
