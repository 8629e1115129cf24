"""Ollama native chat API (`POST /api/chat`) wire types: request, response line, error body.

Pure data: msgspec Structs and the module-level encoder/decoders built from them. No IO.

A streamed answer is NDJSON: one `ChatResponse` per line, the last with `done: true` and
the counters; a non-streaming answer (`"stream": false`) is one `ChatResponse`. Tool calls
always arrive whole, `arguments` a JSON object (never a string fragment). Recent servers
give each call an `id` (`call_` + 8 characters) and a `function.index`; older ones (and the
API docs' example) give neither. An error inside a 200 stream is a bare `{"error": "..."}`
line; an HTTP error answer has the same body.

Optional request fields default to `UNSET` so what the gateway builds carries exactly the
fields it set. Response types are lenient: unknown fields are skipped and every field may
be absent.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET
from msgspec import Struct
from msgspec import UnsetType

# --- request ---------------------------------------------------------------------------------


class RequestFunctionCall(Struct, gc=False):
    name: str
    arguments: dict[str, Any]


class RequestToolCall(Struct, gc=False):
    function: RequestFunctionCall


class Message(Struct, gc=False):
    role: str
    content: str = ""
    thinking: str | UnsetType = UNSET
    images: list[str] | UnsetType = UNSET  # base64, no data: URL prefix
    tool_calls: list[RequestToolCall] | UnsetType = UNSET
    tool_name: str | UnsetType = UNSET  # role "tool": the function whose result this is


class ToolFunction(Struct, gc=False):
    name: str
    description: str | UnsetType = UNSET
    parameters: dict[str, Any] | UnsetType = UNSET


class Tool(Struct, gc=False):
    function: ToolFunction
    type: str = "function"


class Options(Struct, gc=False):
    """The model options the gateway sets (Ollama has many more)."""

    temperature: float | UnsetType = UNSET
    top_p: float | UnsetType = UNSET
    seed: int | UnsetType = UNSET
    stop: list[str] | UnsetType = UNSET
    num_predict: int | UnsetType = UNSET
    presence_penalty: float | UnsetType = UNSET
    frequency_penalty: float | UnsetType = UNSET


class ChatRequest(Struct, gc=False):
    model: str
    messages: list[Message]
    stream: bool
    tools: list[Tool] | UnsetType = UNSET
    options: Options | UnsetType = UNSET
    format: str | dict[str, Any] | UnsetType = UNSET  # "json" or a JSON schema
    think: bool | str | UnsetType = UNSET  # true/false, or "low" | "medium" | "high"


# --- response ----------------------------------------------------------------------------------


class FunctionCall(Struct, gc=False):
    name: str = ""
    arguments: Any = None  # an object; anything else is taken as leniently as possible
    index: int | UnsetType = UNSET  # the server's parser counter: a hint only


class ToolCall(Struct, gc=False):
    function: FunctionCall = msgspec.field(default_factory=FunctionCall)
    id: str | UnsetType = UNSET


class ResponseMessage(Struct, gc=False):
    role: str = "assistant"
    content: str = ""
    thinking: str = ""
    tool_calls: list[ToolCall] | None = None


class ChatResponse(Struct, gc=False):
    """One line of a streamed answer, or the whole non-streaming answer."""

    model: str = ""
    message: ResponseMessage | UnsetType = UNSET
    done: bool = False
    done_reason: str = ""
    prompt_eval_count: int = 0
    eval_count: int = 0
    error: Any = UNSET  # a string in practice


response_decoder = msgspec.json.Decoder(ChatResponse)
encoder = msgspec.json.Encoder()
