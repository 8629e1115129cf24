"""Microbenchmark of a translated provider's per-event path: a recorded Anthropic Messages
stream (text, then two tool calls) through SSEDecoder -> AnthropicStreamTranslator ->
StreamAccumulator -> ChatOutbound, as StreamActor does per upstream read. The target is
<= 15 us per upstream event (an OpenAI upstream's is in test_hot_path.py, <= 5 us).
Like every benchmark here it checks what a client would read, so a broken path fails."""

from __future__ import annotations

import json
from typing import Any

import pytest

from bench.micro.test_hot_path import PerEvent
from bench.micro.test_hot_path import client_calls
from bench.micro.test_hot_path import decode_all
from gateway.framing.sse import SSEDecoder
from gateway.providers.anthropic.adapter import AnthropicStreamTranslator
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.pipeline import ChunkPipeline
from tests.fixtures import FIXTURES

ANTHROPIC = (FIXTURES / "anthropic_text_then_two_tools.sse").read_bytes()
ANTHROPIC_EVENTS = ANTHROPIC.count(b"\ndata: ") + ANTHROPIC.startswith(b"data: ")
READ = 1400  # bytes per upstream read, about one TCP segment


def run_translated(body: bytes) -> tuple[StreamAccumulator, bytes]:
    decoder = SSEDecoder()
    pipeline = ChunkPipeline(
        AnthropicStreamTranslator(model="claude", created=1),
        StreamAccumulator(single_choice=True, id_seed="bench"),
        ChatOutbound(False),
    )
    out: list[bytes] = []
    for start in range(0, len(body), READ):
        out += pipeline.run(decoder.feed(body[start : start + READ]), None)
    out += pipeline.run(decoder.close(), None, closing=True)
    out.append(pipeline.outbound.end(pipeline.acc, pipeline.usage_raw))
    return pipeline.acc, b"".join(out)


@pytest.mark.benchmark(group="decode+translate+encode")
def test_pipeline_translated_anthropic(benchmark: Any, per_event: PerEvent) -> None:
    per_event(ANTHROPIC_EVENTS)
    acc, written = benchmark(run_translated, ANTHROPIC)
    events = decode_all([written])
    assert events[-1].data == b"[DONE]"
    chunks = [json.loads(e.data) for e in events[:-1]]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    calls = client_calls(deltas)  # by index: two calls, counted per stream from 0
    assert [name for name, _ in calls] == ["test_tool", "test_tool"]
    assert all(isinstance(arguments, dict) for _, arguments in calls)
    assert "".join(d.get("content") or "" for d in deltas)  # the text before the calls
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert [f for f in finishes if f] == ["tool_calls"]
    assert acc.usage is not None
