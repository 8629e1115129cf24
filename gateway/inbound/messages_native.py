"""A native Messages attempt's events on their way to the client, sans-IO.

When the upstream is Anthropic itself, each of its SSE events leaves as it came (its name,
its data, its id), re-encoded one event at a time: the decoder already split the body into
events and the translator still reads each one, for usage, tool-call identity and the commit
point. The only thing kept is whether the upstream's own `event: error` went out, so that a
failure after the commit point is not reported twice.
"""

from __future__ import annotations

import msgspec

from gateway.framing.sse import SSEEvent
from gateway.framing.sse import encode_event
from gateway.wire import DECODE_ERRORS


class _Kind(msgspec.Struct, gc=False):
    type: str = ""


_kind_decoder = msgspec.json.Decoder(_Kind)


def is_error_event(frame: SSEEvent) -> bool:
    """Whether `frame` is Anthropic's `error` event; the data's `type` decides when the
    upstream sent no `event:` line (as some proxies and recordings do)."""
    if frame.event:
        return frame.event == "error"
    if b'"error"' not in frame.data:  # a byte search spares decoding every delta
        return False
    try:
        return _kind_decoder.decode(frame.data).type == "error"
    except DECODE_ERRORS:
        return False  # the translator reports a malformed event itself


class NativeEvents:
    """One request's forwarded events; `reset` at every attempt."""

    __slots__ = ("error_sent",)

    def __init__(self) -> None:
        self.error_sent = False

    def reset(self) -> None:
        self.error_sent = False

    def forward(self, frame: SSEEvent) -> bytes:
        if is_error_event(frame):
            self.error_sent = True
        return encode_event(frame.data, frame.event or None, frame.id)
