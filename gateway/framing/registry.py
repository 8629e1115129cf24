"""Framing name -> incremental decoder, so the actor never names a wire format."""

from __future__ import annotations

from gateway.errors import InternalError
from gateway.framing.sse import SSEDecoder


def make_decoder(framing: str) -> SSEDecoder:
    if framing == "sse":
        return SSEDecoder()
    raise InternalError(f"no decoder for framing {framing!r}")
