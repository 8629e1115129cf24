"""The built-in `mock` provider: a deterministic streamed reply, no network, no key.

It renders its answer as OpenAI chat SSE frames, so a mock request runs through the same
decoder, translator and accumulator as a real upstream. Given tools, it calls the first two
of them in parallel, their argument deltas interleaved (0, 1, 0, 1, ...), which is the case
that breaks careless gateways and clients. Sans-IO: the actor plays the frames back.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gateway.errors import UpstreamError
from gateway.providers.base import AdapterDefaults
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.mock.config import MockOptions
from gateway.providers.mock.config import MockProvider
from gateway.providers.openai.adapter import ChatStreamTranslator
from gateway.providers.openai.adapter import error_from_body
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import encoder

REPLY = (
    "Hello from the gateway's mock model. This reply is streamed in deterministic pieces "
    "so that clients, tests and benchmarks can run without any provider key."
)
_SAMPLE_BY_TYPE: dict[str, Any] = {
    "string": "mock",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
    "null": None,
}


def sample_arguments(parameters: Any) -> str:
    """Deterministic JSON arguments that fit a tool's JSON-schema `parameters`."""
    properties = parameters.get("properties") if isinstance(parameters, dict) else None
    if not isinstance(properties, dict):
        return "{}"
    args: dict[str, Any] = {}
    for name, schema in properties.items():
        if not isinstance(schema, dict):
            args[name] = "mock"
        elif isinstance(schema.get("enum"), list) and schema["enum"]:
            args[name] = schema["enum"][0]
        else:
            kind = schema.get("type")
            if isinstance(kind, list):
                kind = next((k for k in kind if k != "null"), "null" if kind else "string")
            args[name] = _SAMPLE_BY_TYPE.get(kind, "mock") if isinstance(kind, str) else "mock"
    return encoder.encode(args).decode()


def split_even(text: str, parts: int) -> list[str]:
    """`text` cut into `parts` non-empty pieces (fewer when it is shorter)."""
    parts = max(1, min(parts, len(text)))
    size, extra = divmod(len(text), parts)
    out, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        out.append(text[start:end])
        start = end
    return out


def _called_tools(call: UpstreamCall) -> list[tuple[str, str]]:
    """(name, arguments) of the tools the mock calls: the first two function tools."""
    request = call.request
    if not request.tools or request.tool_choice == "none":
        return []
    tools = [t.function for t in request.tools if t.type == "function" and t.function]
    return [(f.name, sample_arguments(f.parameters or {})) for f in tools[:2] if f]


def render_frames(call: UpstreamCall, options: MockOptions) -> list[bytes]:
    """The whole mock answer as SSE frames, one frame per playback step."""
    chunk_id = "chatcmpl-mock-" + call.request_id

    def frame(choice: ChunkChoice | None, usage: Usage | None = None) -> bytes:
        chunk = ChatChunk(id=chunk_id, created=call.created, model=call.model)
        if choice is not None:
            chunk.choices = [choice]
        if usage is not None:
            chunk.usage = usage
        return b"data: " + encoder.encode(chunk) + b"\n\n"

    frames = [frame(ChunkChoice(delta=Delta(role="assistant", content=""), finish_reason=None))]
    tools = _called_tools(call)
    if tools:
        pieces = [split_even(args, max(1, options.chunks // len(tools))) for _, args in tools]
        for i, (name, _) in enumerate(tools):
            first = ToolCallDelta(
                index=i,
                id=f"call_mock_{i}",
                type="function",
                function=FunctionDelta(name=name, arguments=""),
            )
            frames.append(frame(ChunkChoice(delta=Delta(tool_calls=[first]), finish_reason=None)))
        for step in range(max(len(p) for p in pieces)):
            for i, parts in enumerate(pieces):
                if step < len(parts):
                    delta = ToolCallDelta(index=i, function=FunctionDelta(arguments=parts[step]))
                    frames.append(
                        frame(ChunkChoice(delta=Delta(tool_calls=[delta]), finish_reason=None))
                    )
        finish = "tool_calls"
    else:
        frames += [
            frame(ChunkChoice(delta=Delta(content=piece), finish_reason=None))
            for piece in split_even(REPLY, options.chunks)
        ]
        finish = "stop"
    frames.append(frame(ChunkChoice(delta=Delta(), finish_reason=finish)))
    prompt = max(1, len(encoder.encode(call.body.get("messages", []))) // 4)
    completion = len(frames) - 2
    usage = Usage(
        prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion
    )
    frames.append(frame(None, usage))
    frames.append(b"data: [DONE]\n\n")
    return frames


class MockAdapter(AdapterDefaults):
    """The `mock` kind. Non-streaming requests are served from the stream (accumulated)."""

    native_unary = False

    def __init__(self, provider: MockProvider) -> None:
        self._options = provider.mock or MockOptions()

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        return UpstreamRequest(
            url="mock://chat/completions",
            playback=render_frames(call, self._options),
            playback_delay_s=self._options.delay_s,
        )

    def translator(self, call: UpstreamCall) -> ChatStreamTranslator:
        return ChatStreamTranslator()

    def unary_result(self, call: UpstreamCall, body: bytes) -> UnaryResult:
        raise NotImplementedError("the mock provider answers non-streaming requests by streaming")

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError:
        return error_from_body(status, body)
