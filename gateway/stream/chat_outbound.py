"""Canonical chunks out as OpenAI Chat Completions: SSE chunks or one `chat.completion`.

Sans-IO: chunks in, bytes out. A chunk the accumulator left unchanged goes out as the
upstream's own bytes; anything the gateway built or corrected is encoded here.

The usage chunk a client asked for (`stream_options.include_usage`) carries the request's
cost as `usage.cost_usd` (a JSON number, USD) once accounting has set `cost_usd`: an extra
field, which OpenAI's clients keep without complaint (openai-python exposes it in
`usage.model_extra`).
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

import msgspec

from gateway.errors import GatewayError
from gateway.framing.sse import DONE
from gateway.framing.sse import encode_comment
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ErrorBody
from gateway.wire.openai_chat import ErrorDetail
from gateway.wire.openai_chat import encoder

_any_json = msgspec.json.Decoder()

KEEPALIVE = encode_comment("keep-alive")


def error_body(err: GatewayError) -> ErrorBody:
    return ErrorBody(
        error=ErrorDetail(message=err.message, type=err.type, param=err.param, code=err.code)
    )


class ChatOutbound:
    """SSE for one chat stream. `include_usage`: the client asked for the usage chunk."""

    keepalive = KEEPALIVE
    passthrough = False
    settle: Callable[[], Awaitable[None]] | None = None  # nothing to settle

    __slots__ = ("cost_usd", "include_usage")

    def __init__(self, include_usage: bool) -> None:
        self.include_usage = include_usage
        self.cost_usd: str | None = None  # set by accounting before `end()`: USD, decimal

    def start_attempt(self, native: bool, call: UpstreamCall | None = None) -> None:
        pass  # no per-attempt state: chat upstreams are translated or forwarded chunk by chunk

    def frame(self, frame: Any) -> bytes:
        raise AssertionError("chat streams are never passed through frame by frame")

    def chunk(self, chunk: ChatChunk, raw: bytes | None) -> bytes:
        return b"data: " + (raw if raw is not None else encoder.encode(chunk)) + b"\n\n"

    def end(self, acc: StreamAccumulator, usage_raw: bytes | None) -> bytes:
        """The tail of a complete stream: missing finishes, the usage chunk if asked, [DONE]."""
        parts = []
        missing = acc.finish_missing()
        if missing:
            parts.append(self.chunk(self._template(acc, choices=missing), None))
        if self.include_usage and acc.usage is not None:
            if self.cost_usd is not None:
                parts.append(self._costed_usage(acc, usage_raw, self.cost_usd))
            elif usage_raw is not None:
                parts.append(self.chunk(acc.usage_chunk or ChatChunk(), usage_raw))
            else:
                usage_chunk = self._template(acc, choices=[])
                usage_chunk.usage = acc.usage
                parts.append(self.chunk(usage_chunk, None))
        parts.append(DONE)
        return b"".join(parts)

    def _costed_usage(self, acc: StreamAccumulator, usage_raw: bytes | None, cost: str) -> bytes:
        """The usage chunk (the upstream's own, or one built here) with `usage.cost_usd`."""
        chunk: Any = _any_json.decode(usage_raw) if usage_raw is not None else None
        if not isinstance(chunk, dict) or not isinstance(chunk.get("usage"), dict):
            built = self._template(acc, choices=[])
            built.usage = acc.usage
            chunk = msgspec.to_builtins(built)
        chunk["usage"]["cost_usd"] = float(cost)
        return b"data: " + encoder.encode(chunk) + b"\n\n"

    def error(self, err: GatewayError) -> bytes:
        """A failure after the commit point: an error event, then [DONE]; never a silent end."""
        return b"data: " + encoder.encode(error_body(err)) + b"\n\n" + DONE

    def completion(self, acc: StreamAccumulator, *, id: str, model: str, created: int) -> bytes:
        return encoder.encode(acc.completion(id=id, model=model, created=created))

    def unary(self, result: UnaryResult) -> bytes:
        return result.body  # already a chat.completion (adapters translate to it)

    @staticmethod
    def _template(acc: StreamAccumulator, choices: list) -> ChatChunk:  # type: ignore[type-arg]
        return ChatChunk(id=acc.id, created=acc.created, model=acc.model, choices=choices)
