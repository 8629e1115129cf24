"""Microbenchmarks of the per-event hot path: SSE decode, translate, accumulate, encode.

Every round processes one whole upstream stream; `per_event` records how many events a round
handles so the summary reads as microseconds per event. Every benchmark also checks the work
it timed, so a broken path fails instead of looking fast.

    .venv/bin/python -m pytest -q bench/micro --benchmark-enable --benchmark-only

Without `--benchmark-enable` (the repository's default addopts disable benchmarks) each
function runs once and only the checks run.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from bench.micro.streams import CALLS
from bench.micro.streams import Stream
from bench.micro.streams import openai_stream
from gateway.framing.sse import DONE
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.providers.base import Translated
from gateway.providers.openai.adapter import ChatStreamTranslator
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.pipeline import ChunkPipeline
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import chunk_decoder
from tests.fixtures import FIXTURES

PerEvent = Callable[[int], None]

SEQUENTIAL = openai_stream()  # OpenAI's own order: each call streamed whole
REPEATING = openai_stream(repeat_identity=True)  # every tool-call delta repeats id/type/name
GEMINI = (FIXTURES / "gemini_function_calls.sse").read_bytes()  # CRLF line ends
GEMINI_EVENTS = 2


def decode_all(reads: list[bytes]) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    for data in reads:
        events += decoder.feed(data)
    events += decoder.close()
    return events


# --- SSE decode ----------------------------------------------------------------------------


@pytest.mark.benchmark(group="sse-decode")
@pytest.mark.parametrize("reads", ["1400B", "event"])
def test_sse_decode_openai(benchmark: Any, per_event: PerEvent, reads: str) -> None:
    chunks = SEQUENTIAL.reads() if reads == "1400B" else SEQUENTIAL.event_reads()
    per_event(SEQUENTIAL.events)
    events = benchmark(decode_all, chunks)
    assert len(events) == SEQUENTIAL.events
    assert events[-1].data == b"[DONE]"
    assert all(e.data.startswith(b'{"id":"chatcmpl-') for e in events[:-1])
    assert b"".join(b"data: " + e.data + b"\n\n" for e in events) == SEQUENTIAL.body


@pytest.mark.benchmark(group="sse-decode")
def test_sse_decode_gemini_crlf(benchmark: Any, per_event: PerEvent) -> None:
    assert b"\r\n" in GEMINI
    reads = [GEMINI[k : k + 1400] for k in range(0, len(GEMINI), 1400)]
    per_event(GEMINI_EVENTS)
    events = benchmark(decode_all, reads)
    assert len(events) == GEMINI_EVENTS
    for event in events:
        assert b"\r" not in event.data
        assert json.loads(event.data)["candidates"]


# --- translate alone: msgspec decode of each chunk ------------------------------------------


def translate_all(frames: list[SSEEvent]) -> tuple[ChatStreamTranslator, list[Translated]]:
    translator = ChatStreamTranslator()
    items: list[Translated] = []
    for frame in frames:
        items += translator.feed(frame)
    return translator, items


@pytest.mark.benchmark(group="translate")
def test_translate_openai(benchmark: Any, per_event: PerEvent) -> None:
    """ChatStreamTranslator.feed over pre-decoded SSE events: one msgspec decode per chunk."""
    frames = decode_all([SEQUENTIAL.body])
    per_event(len(frames))
    translator, items = benchmark(translate_all, frames)
    assert translator.done
    assert len(items) == SEQUENTIAL.events - 1  # [DONE] is not a chunk
    assert all(item.raw is frame.data for item, frame in zip(items, frames, strict=False))
    deltas = [c.delta for item in items for c in item.chunk.choices]
    assert "".join(d.content for d in deltas if d.content) == SEQUENTIAL.content


# --- decode + translate + accumulate + encode, as read_loop.read_to_end does per read -------


class Pipeline:
    """The actor's per-read work without the IO: `feed` is one upstream read through
    SSEDecoder.feed and the actor's own ChunkPipeline (ChatStreamTranslator.feed ->
    StreamAccumulator.add -> ChatOutbound.chunk), then the b"".join that the client write
    takes; `finish` is the end of the body (decoder.close, the same path, ChatOutbound.end)."""

    __slots__ = ("chunks", "decoder")

    def __init__(self) -> None:
        self.decoder = SSEDecoder()
        self.chunks = ChunkPipeline(
            ChatStreamTranslator(),
            StreamAccumulator(single_choice=True, id_seed="bench"),
            ChatOutbound(False),
        )

    @property
    def acc(self) -> StreamAccumulator:
        return self.chunks.acc

    def feed(self, data: bytes) -> bytes:
        return b"".join(self.chunks.run(self.decoder.feed(data), None))

    def finish(self) -> bytes:
        out = self.chunks.run(self.decoder.close(), None, closing=True)
        return b"".join(out) + self.chunks.outbound.end(self.acc, self.chunks.usage_raw)


def run_pipeline(reads: list[bytes]) -> tuple[Pipeline, list[bytes]]:
    pipeline = Pipeline()
    writes = [w for w in map(pipeline.feed, reads) if w]
    writes.append(pipeline.finish())
    return pipeline, writes


def client_calls(deltas: list[dict[str, Any]]) -> list[tuple[str, Any]]:
    """The tool calls a client assembles from chat deltas: (name, parsed arguments) by index."""
    args: dict[int, list[str]] = {}
    names: dict[int, str] = {}
    for delta in deltas:
        for tc in delta.get("tool_calls", ()):
            if "name" in tc["function"]:
                names[tc["index"]] = tc["function"]["name"]
            args.setdefault(tc["index"], []).append(tc["function"].get("arguments", ""))
    return [(names[i], json.loads("".join(args[i]))) for i in sorted(args)]


def check_client_stream(stream: Stream, written: bytes) -> list[dict[str, Any]]:
    """What a client reads must add up to the stream's content and tool calls; returns the
    client's chunks (the usage chunk is hidden: this client did not ask for it)."""
    events = decode_all([written])
    assert events[-1].data == b"[DONE]"
    chunks = [json.loads(e.data) for e in events[:-1]]
    assert all(len(c["choices"]) == 1 for c in chunks)
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("content") or "" for d in deltas) == stream.content
    assert client_calls(deltas) == stream.calls
    finishes = [c["choices"][0]["finish_reason"] for c in chunks]
    assert [f for f in finishes if f] == ["tool_calls"]
    return chunks


def check_accumulated(acc: StreamAccumulator) -> None:
    message = acc.message()
    assert message.tool_calls is not UNSET
    calls = [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls]
    assert calls == CALLS
    assert acc.usage is not None
    assert acc.usage.prompt_tokens == 364


def usage_event_bytes(stream: Stream) -> bytes:
    events = decode_all([stream.body])
    usage = [e for e in events if b'"choices":[]' in e.data]
    assert len(usage) == 1
    return b"data: " + usage[0].data + b"\n\n"


@pytest.mark.benchmark(group="decode+translate+encode")
def test_pipeline_passthrough(benchmark: Any, per_event: PerEvent) -> None:
    """A well-formed OpenAI upstream: every chunk goes out as the upstream's own bytes."""
    reads = SEQUENTIAL.reads()
    per_event(SEQUENTIAL.events)
    pipeline, writes = benchmark(run_pipeline, reads)
    written = b"".join(writes)
    check_client_stream(SEQUENTIAL, written)
    check_accumulated(pipeline.acc)
    # Byte-identical passthrough: the input minus the usage chunk the client did not ask for.
    assert written == SEQUENTIAL.body.replace(usage_event_bytes(SEQUENTIAL), b"")
    assert written.endswith(DONE)


@pytest.mark.benchmark(group="decode+translate+encode")
def test_pipeline_rewrite(benchmark: Any, per_event: PerEvent) -> None:
    """An upstream that repeats id/type/name on every tool-call delta: the accumulator
    corrects those chunks and ChatOutbound re-encodes them with msgspec."""
    reads = REPEATING.reads()
    per_event(REPEATING.events)
    pipeline, writes = benchmark(run_pipeline, reads)
    chunks = check_client_stream(REPEATING, b"".join(writes))
    check_accumulated(pipeline.acc)
    rewritten = [
        tc
        for c in chunks
        for tc in c["choices"][0]["delta"].get("tool_calls", ())
        if "id" not in tc
    ]
    arg_deltas = sum(1 for e in decode_all([REPEATING.body]) if b'"arguments":"' in e.data)
    assert len(rewritten) == arg_deltas - len(CALLS)  # all but the start delta of each call
    assert all(set(tc) == {"index", "function"} for tc in rewritten)
    assert all(set(tc["function"]) == {"arguments"} for tc in rewritten)


# --- accumulator alone ------------------------------------------------------------------------


def decoded_chunks(stream: Stream) -> list[ChatChunk]:
    return [chunk_decoder.decode(e.data) for e in decode_all([stream.body]) if e.data != b"[DONE]"]


def accumulate(chunks: list[ChatChunk]) -> tuple[StreamAccumulator, list[ChatChunk | None]]:
    acc = StreamAccumulator(single_choice=True, id_seed="bench")
    add = acc.add
    return acc, [add(c) for c in chunks]


@pytest.mark.benchmark(group="accumulator")
@pytest.mark.parametrize("identity", ["index-only", "repeated"])
def test_accumulator_interleaved(benchmark: Any, per_event: PerEvent, identity: str) -> None:
    """Three parallel calls whose argument deltas arrive round-robin, pre-decoded."""
    repeated = identity == "repeated"
    stream = openai_stream(content_chunks=0, interleave=True, repeat_identity=repeated)
    chunks = decoded_chunks(stream)
    per_event(len(chunks))
    acc, out = benchmark(accumulate, chunks)
    check_accumulated(acc)
    assert out[-1] is None  # the usage chunk is held back
    same = sum(1 for o, c in zip(out, chunks, strict=True) if o is c)
    if not repeated:
        assert same == len(chunks) - 1  # everything else passes through unchanged
    else:
        # The role chunk, the three start deltas and the finish chunk pass through.
        assert same == 1 + len(CALLS) + 1
