"""Framing name -> incremental decoder, so the actor never names a wire format."""

from __future__ import annotations

from typing import Any
from typing import Protocol

from gateway.errors import InternalError
from gateway.framing.aws_eventstream import EventStreamDecoder
from gateway.framing.ndjson import NDJSONDecoder
from gateway.framing.sse import SSEDecoder


class FrameDecoder(Protocol):
    """Bytes in, frames out (what a frame is depends on the framing; the provider's
    translator knows)."""

    def feed(self, data: bytes) -> list[Any]: ...

    def close(self) -> list[Any]: ...


def make_decoder(framing: str) -> FrameDecoder:
    if framing == "sse":
        return SSEDecoder()
    if framing == "ndjson":
        return NDJSONDecoder()
    if framing == "aws-eventstream":
        return EventStreamDecoder()
    raise InternalError(f"no decoder for framing {framing!r}")
