"""The stored answer: the canonical answer of one request, and how it is replayed.

Sans-IO. An entry is what the accumulator knows of a complete answer (text, reasoning,
refusal, tool calls with their ids, names and arguments in order, the finish reason, the
upstream's usage) plus what a hit reports (who served it, what it cost). It is stored as
JSON, zlib-compressed past COMPRESS_AT bytes (one byte of prefix says which).

`replay_chunks` cuts an entry back into canonical chunks: the route's own outbound encodes
them, so a hit leaves in the client's API and mode like any answer; a streamed hit is several
chunks (text in pieces of PIECE characters) that a client assembles into the original.
"""

from __future__ import annotations

import zlib

import msgspec
from msgspec import UNSET

from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatCompletion
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage

COMPLETE = frozenset({"stop", "tool_calls", "length"})  # only these answers are stored
COMPRESS_AT = 2048
PIECE = 32  # characters per replayed delta
_JSON, _ZLIB = b"j", b"z"


class CachedCall(msgspec.Struct, frozen=True, array_like=True):
    id: str
    name: str
    arguments: str


class CachedAnswer(msgspec.Struct, frozen=True, kw_only=True):
    """One complete answer (a single choice)."""

    finish_reason: str
    content: str | None = None
    reasoning: str | None = None
    refusal: str | None = None
    tool_calls: list[CachedCall] = []
    usage: Usage | None = None
    model: str = ""  # the model the upstream said it was
    provider: str = ""  # who served it
    upstream_model: str = ""
    cost_nanos: int = 0  # what it cost then: what each hit saves
    stored_at: float = 0.0  # wall clock


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(CachedAnswer)


def answer_of(completion: ChatCompletion) -> CachedAnswer | None:
    """The entry of a whole answer, or None when it must not be stored (more than one
    choice, or an answer that did not finish by itself)."""
    if len(completion.choices) != 1:
        return None
    choice = completion.choices[0]
    if choice.finish_reason not in COMPLETE:
        return None
    message = choice.message
    calls = message.tool_calls if message.tool_calls is not UNSET else []
    usage = completion.usage if completion.usage is not UNSET else None
    reasoning, refusal = message.reasoning_content, message.refusal
    return CachedAnswer(
        finish_reason=choice.finish_reason or "stop",
        content=message.content,
        reasoning=reasoning if isinstance(reasoning, str) else None,
        refusal=refusal if isinstance(refusal, str) else None,
        tool_calls=[CachedCall(c.id, c.function.name, c.function.arguments) for c in calls],
        usage=usage,
        model=completion.model,
    )


def encode(answer: CachedAnswer) -> bytes:
    raw = _encoder.encode(answer)
    if len(raw) >= COMPRESS_AT:
        return _ZLIB + zlib.compress(raw, 6)
    return _JSON + raw


def decode(data: bytes) -> CachedAnswer | None:
    """The entry, or None for bytes that are not one (another version's, damaged)."""
    try:
        if data[:1] == _ZLIB:
            return _decoder.decode(zlib.decompress(data[1:]))
        if data[:1] == _JSON:
            return _decoder.decode(data[1:])
    except (msgspec.DecodeError, zlib.error):
        return None
    return None


def _pieces(text: str) -> list[str]:
    return [text[i : i + PIECE] for i in range(0, len(text), PIECE)] or [""]


def replay_chunks(answer: CachedAnswer, *, id: str, model: str, created: int) -> list[ChatChunk]:
    """The answer as a stream of canonical chunks: role, reasoning, text, each tool call
    (its identity first, then its arguments), the finish, and the usage."""

    def chunk(delta: Delta, finish: str | None = None) -> ChatChunk:
        choice = ChunkChoice(delta=delta, finish_reason=finish if finish is not None else UNSET)
        return ChatChunk(id=id, created=created, model=model, choices=[choice])

    out = [chunk(Delta(role="assistant"))]
    if answer.reasoning:
        out.extend(chunk(Delta(reasoning_content=p)) for p in _pieces(answer.reasoning))
    if answer.refusal:
        out.extend(chunk(Delta(refusal=p)) for p in _pieces(answer.refusal))
    if answer.content:
        out.extend(chunk(Delta(content=p)) for p in _pieces(answer.content))
    for index, call in enumerate(answer.tool_calls):
        first, *rest = _pieces(call.arguments)
        out.append(
            chunk(
                Delta(
                    tool_calls=[
                        ToolCallDelta(
                            index=index,
                            id=call.id,
                            type="function",
                            function=FunctionDelta(name=call.name, arguments=first),
                        )
                    ]
                )
            )
        )
        for piece in rest:
            more = ToolCallDelta(index=index, function=FunctionDelta(arguments=piece))
            out.append(chunk(Delta(tool_calls=[more])))
    out.append(chunk(Delta(), answer.finish_reason))
    if answer.usage is not None:
        out.append(ChatChunk(id=id, created=created, model=model, choices=[], usage=answer.usage))
    return out
