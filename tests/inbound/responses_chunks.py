"""Canonical chunks for the Responses outbound tests, and reading its events back."""

from __future__ import annotations

import json
from typing import Any

from gateway.framing.sse import SSEDecoder
from gateway.inbound.responses_events import response_template
from gateway.inbound.responses_outbound import ResponsesOutbound
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import CompletionTokensDetails
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage

USAGE = Usage(
    prompt_tokens=20,
    completion_tokens=9,
    total_tokens=29,
    prompt_tokens_details=PromptTokensDetails(cached_tokens=4),
    completion_tokens_details=CompletionTokensDetails(reasoning_tokens=3),
)
Event = tuple[str, dict[str, Any]]


def outbound(**body: Any) -> ResponsesOutbound:
    template = response_template(
        {"model": "smart", "input": "hi", **body}, id="resp_abc", model="smart", created_at=1700
    )
    return ResponsesOutbound(template, lambda: 1800.5)


def chunk(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    refusal: str | None = None,
    calls: list[ToolCallDelta] | None = None,
    finish: str | None = None,
    role: str | None = None,
) -> ChatChunk:
    delta = Delta()
    if role is not None:
        delta.role = role
    if content is not None:
        delta.content = content
    if reasoning is not None:
        delta.reasoning_content = reasoning
    if refusal is not None:
        delta.refusal = refusal
    if calls is not None:
        delta.tool_calls = calls
    choice = ChunkChoice(delta=delta)
    if finish is not None:
        choice.finish_reason = finish
    return ChatChunk(id="c", model="up-model", choices=[choice])


def call(index: int, args: str, id: str | None = None, name: str | None = None) -> ToolCallDelta:
    if id is None:
        return ToolCallDelta(index=index, function=FunctionDelta(arguments=args))
    return ToolCallDelta(
        index=index, id=id, type="function", function=FunctionDelta(name=name, arguments=args)
    )


def decode(data: bytes) -> list[Event]:
    decoder = SSEDecoder()
    frames = decoder.feed(data) + decoder.close()
    events = []
    for frame in frames:
        payload = json.loads(frame.data)
        assert payload["type"] == frame.event
        events.append((frame.event, payload))
    return events


def run(ob: ResponsesOutbound, chunks: list[ChatChunk], usage: Usage | None = USAGE) -> list[Event]:
    """Chunks through the accumulator and the outbound, as the actor does."""
    ob.start_attempt(native=False)
    acc = StreamAccumulator(id_seed="req1")
    out = []
    for c in chunks:
        fixed = acc.add(c)
        if fixed is not None:
            out.append(ob.chunk(fixed, None))
    if usage is not None:
        acc.add(ChatChunk(id="c", usage=usage))
    out.append(ob.end(acc, None))
    events = decode(b"".join(out))
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    return events


def types(events: list[Event]) -> list[str]:
    return [name.removeprefix("response.") for name, _ in events]
