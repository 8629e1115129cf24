"""One attempt's chunk path: upstream frames -> translator -> accumulator -> outbound bytes.

Sans-IO: frames in, bytes out; the actor owns one per attempt and does the reading and the
writing. In passthrough (the upstream speaks the client's API) each frame leaves as the
outbound renders it and the chunks only feed the accumulator (usage, identity, commit).
"""

from __future__ import annotations

from typing import Any
from typing import Protocol

from gateway.errors import UpstreamError
from gateway.providers.base import StreamTranslator
from gateway.providers.base import Translated
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.outbound import Outbound


class Held(Protocol):
    """Where bytes wait for the client (the ClientStream): `pending` is read at the moment
    of use, since committing replaces the list."""

    pending: list[bytes]


class ChunkPipeline:
    __slots__ = ("acc", "outbound", "translator", "usage_raw")

    def __init__(
        self, translator: StreamTranslator, acc: StreamAccumulator, outbound: Outbound
    ) -> None:
        self.translator = translator
        self.acc = acc
        self.outbound = outbound
        self.usage_raw: bytes | None = None  # the upstream's own usage chunk, held for the end

    def run(self, frames: list[Any], spill: Held | None, closing: bool = False) -> list[bytes]:
        """The bytes for the client that `frames` make. With `closing` (the upstream's EOF)
        the translator's own `close()` items follow the last frames (a stream without an end
        marker, like Gemini's, finishes there). On an upstream error, what came before it is
        added to `spill.pending` (a committed client still gets it, ahead of the error event)."""
        out: list[bytes] = []
        translator = self.translator
        try:
            if self.outbound.passthrough:
                discard: list[bytes] = []
                for frame in frames:
                    out.append(self.outbound.frame(frame))
                    self._add(translator.feed(frame), discard)
                if closing:
                    self._add(translator.close(), discard)
                return out
            for frame in frames:
                self._add(translator.feed(frame), out)
            if closing:
                self._add(translator.close(), out)
        except UpstreamError:
            if spill is not None:
                spill.pending.extend(out)
            raise
        return out

    def _add(self, items: list[Translated], out: list[bytes]) -> None:
        acc, outbound = self.acc, self.outbound
        for item in items:
            chunk = acc.add(item.chunk)
            if chunk is None:
                if acc.usage_chunk is item.chunk:
                    self.usage_raw = item.raw
                continue
            out.append(outbound.chunk(chunk, item.raw if chunk is item.chunk else None))
