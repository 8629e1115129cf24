"""Google Gemini API (generativelanguage.googleapis.com) wire types: `generateContent` and
`streamGenerateContent` request, response and error bodies.

Pure data: msgspec Structs and the module-level encoder/decoders built from them. No IO.

The JSON names are camelCase (`rename="camel"`: `inline_data` is `inlineData`). Optional
fields default to `UNSET` so what the gateway builds carries exactly the fields it set.
Response types are lenient: unknown fields are skipped, and every field may be absent
(gemini-2.0 leaves out `candidates[].index`; a prompt blocked by safety has no candidates).
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import Struct
from msgspec import UnsetType

# --- shared by request and response ----------------------------------------------------------


class Blob(Struct, rename="camel", gc=False):
    """Inline bytes, base64 in JSON."""

    mime_type: str
    data: str


class FileData(Struct, rename="camel", gc=False):
    """A file by URI (an http(s) URL or a Files API URI)."""

    file_uri: str
    mime_type: str | UnsetType = UNSET


class FunctionCall(Struct, gc=False):
    """A call the model made. It arrives whole: `args` is an object, never a fragment.
    `name` and `args` are absent in the empty `functionCall: {}` that ends Vertex's
    streamed partial arguments; `id` is defined but real responses do not carry it."""

    name: str | UnsetType = UNSET
    args: dict[str, Any] | UnsetType | None = UNSET
    id: str | UnsetType = UNSET


class FunctionResponse(Struct, gc=False):
    """The result of a call, sent back in a `user` turn."""

    name: str
    response: dict[str, Any]


class Part(Struct, rename="camel", gc=False):
    """One part of a turn: exactly one of text, inlineData, fileData, functionCall,
    functionResponse is set (`thought: true` marks a text part as the model's thinking)."""

    text: str | UnsetType = UNSET
    thought: bool | UnsetType | None = UNSET
    inline_data: Blob | UnsetType = UNSET
    file_data: FileData | UnsetType = UNSET
    function_call: FunctionCall | UnsetType = UNSET
    function_response: FunctionResponse | UnsetType = UNSET
    thought_signature: str | UnsetType = UNSET


class Content(Struct, gc=False):
    """A turn: role `user` or `model` (absent in systemInstruction)."""

    parts: list[Part] = msgspec.field(default_factory=list)
    role: str | UnsetType = UNSET


# --- request -----------------------------------------------------------------------------


class FunctionDeclaration(Struct, gc=False):
    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET


class Tool(Struct, rename="camel", gc=False):
    function_declarations: list[FunctionDeclaration]


class FunctionCallingConfig(Struct, rename="camel", gc=False):
    mode: str  # AUTO | ANY | NONE
    allowed_function_names: list[str] | UnsetType = UNSET


class ToolConfig(Struct, rename="camel", gc=False):
    function_calling_config: FunctionCallingConfig


class ThinkingConfig(Struct, rename="camel", gc=False):
    thinking_budget: int
    include_thoughts: bool | UnsetType = UNSET


class GenerationConfig(Struct, rename="camel", gc=False):
    max_output_tokens: int | UnsetType = UNSET
    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    stop_sequences: list[str] | UnsetType = UNSET
    seed: int | UnsetType = UNSET
    candidate_count: int | UnsetType = UNSET
    presence_penalty: float | UnsetType = UNSET
    frequency_penalty: float | UnsetType = UNSET
    response_mime_type: str | UnsetType = UNSET
    response_schema: dict[str, Any] | UnsetType = UNSET
    thinking_config: ThinkingConfig | UnsetType = UNSET


class GenerateContentRequest(Struct, rename="camel", gc=False):
    """The body of `models/{model}:generateContent` and `:streamGenerateContent`."""

    contents: list[Content]
    system_instruction: Content | UnsetType = UNSET
    tools: list[Tool] | UnsetType = UNSET
    tool_config: ToolConfig | UnsetType = UNSET
    generation_config: GenerationConfig | UnsetType = UNSET


# --- response ------------------------------------------------------------------------------


class Candidate(Struct, rename="camel", gc=False):
    content: Content | UnsetType = UNSET
    finish_reason: str | UnsetType | None = UNSET
    index: int | UnsetType = UNSET


class UsageMetadata(Struct, rename="camel", gc=False):
    """Token counts. Sent on every stream chunk and not monotonic: the last one counts."""

    prompt_token_count: int = 0
    candidates_token_count: int = 0
    total_token_count: int = 0
    thoughts_token_count: int = 0
    cached_content_token_count: int | UnsetType = UNSET
    tool_use_prompt_token_count: int = 0


class PromptFeedback(Struct, rename="camel", gc=False):
    block_reason: str | UnsetType | None = UNSET


class ApiError(Struct, gc=False):
    """Google's error shape: `{"error": {"code": 429, "message": ..., "status": ...}}`."""

    code: int | None = None
    message: str = ""
    status: str | None = None


class GenerateContentResponse(Struct, rename="camel", gc=False):
    """A whole answer (`generateContent`) or one stream event (`streamGenerateContent`).

    `error` is not part of a normal response: it is how an error reaches a 200 stream."""

    candidates: list[Candidate] = msgspec.field(default_factory=list)
    usage_metadata: UsageMetadata | UnsetType = UNSET
    model_version: str | UnsetType = UNSET
    response_id: str | UnsetType = UNSET
    prompt_feedback: PromptFeedback | UnsetType = UNSET
    error: ApiError | UnsetType = UNSET


class ErrorBody(Struct, gc=False):
    error: ApiError


response_decoder = msgspec.json.Decoder(GenerateContentResponse)
error_body_decoder = msgspec.json.Decoder(ErrorBody)
encoder = msgspec.json.Encoder()

__all__ = [
    "UNSET",
    "ApiError",
    "Blob",
    "Candidate",
    "Content",
    "ErrorBody",
    "FileData",
    "FunctionCall",
    "FunctionCallingConfig",
    "FunctionDeclaration",
    "FunctionResponse",
    "GenerateContentRequest",
    "GenerateContentResponse",
    "GenerationConfig",
    "Part",
    "PromptFeedback",
    "ThinkingConfig",
    "Tool",
    "ToolConfig",
    "UsageMetadata",
]
