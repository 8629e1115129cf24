"""What a client sees of a translated stream: the translator's chunks through the stream's
accumulator, as the chunk pipeline sends them (corrected copies where the accumulator
renumbers a tool call, the usage chunk held for the end). The accumulator is the one
tool-call counter of a stream, so tool-call indexes are checked here, not on the
translator's own output (which carries the upstream's identity of each call)."""

from __future__ import annotations

from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk


def client_chunks(chunks: list[ChatChunk], id_seed: str = "gw") -> list[ChatChunk]:
    acc = StreamAccumulator(id_seed=id_seed)
    out = [sent for chunk in chunks if (sent := acc.add(chunk)) is not None]
    if acc.usage_chunk is not None:
        out.append(acc.usage_chunk)
    return out
