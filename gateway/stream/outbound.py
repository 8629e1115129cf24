"""What an inbound API gives the actor: how canonical chunks leave toward its client.

Each inbound API (Chat Completions, Responses, Anthropic Messages) has one `Outbound` per
request. The actor feeds it the accumulator's chunks and asks it for the stream's tail, a
post-commit error, or a whole non-streaming answer. Sans-IO: chunks in, bytes out.

`passthrough`: for an attempt whose upstream speaks the inbound API itself (a Responses
client in front of a Responses upstream), every upstream frame leaves as `frame()` renders
it, and the chunks (still made, for usage, identity and the commit point) are not encoded.
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any
from typing import Protocol

from gateway.errors import GatewayError
from gateway.providers.base import UnaryResult
from gateway.providers.base import UpstreamCall
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk


class Outbound(Protocol):
    keepalive: bytes  # written while a committed stream's upstream is silent
    passthrough: bool  # set by `start_attempt`: upstream frames go out as they came
    # Awaited once the answer is complete and before its last bytes leave (after `end()`,
    # `completion()` or `unary()`), so that what the answer lets a client do next works at
    # once: a stored response that a next request names. None: nothing to do.
    settle: Callable[[], Awaitable[None]] | None

    def start_attempt(self, native: bool, call: UpstreamCall | None = None) -> None:
        """A new upstream attempt begins (nothing of a failed one reached the client);
        `native`: its upstream speaks this inbound API and its frames pass through; `call`:
        the attempt (provider, upstream model), for what depends on it (its price)."""
        ...

    def chunk(self, chunk: ChatChunk, raw: bytes | None) -> bytes:
        """One canonical chunk as the client's events (b"" when it makes none); `raw` is the
        upstream's own bytes when the chunk is the upstream's unchanged."""
        ...

    def frame(self, frame: Any) -> bytes:
        """One upstream frame, forwarded (only called while `passthrough`)."""
        ...

    def end(self, acc: StreamAccumulator, usage_raw: bytes | None) -> bytes:
        """The tail of a complete stream."""
        ...

    def error(self, err: GatewayError) -> bytes:
        """A failure after the commit point, as the last events of the stream."""
        ...

    def completion(self, acc: StreamAccumulator, *, id: str, model: str, created: int) -> bytes:
        """The whole answer of an accumulated stream, as one non-streaming JSON body."""
        ...

    def unary(self, result: UnaryResult) -> bytes:
        """A non-streaming upstream answer (`result.api` says its format) as the client's
        JSON body."""
        ...
