"""The join of a continued stream, sans-IO (stream/continuation.py): an Anthropic stream
cut at any byte after its first text (inside a word, inside a multi-byte character, after a
space), what the client had of it, and another upstream's continuation from the prefill it
was sent assemble to the answer exactly once, with one role, one finish and the stream's
own id, in every continuation mode."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.errors import UpstreamProtocolError
from gateway.framing.sse import SSEDecoder
from gateway.providers.anthropic.adapter import AnthropicStreamTranslator
from gateway.providers.base import CONTINUE_FINAL_MESSAGE
from gateway.providers.base import PREFILL
from gateway.providers.base import PREFIX
from gateway.providers.openai.adapter import ChatStreamTranslator
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.continuation import Continuation
from gateway.stream.continuation import add_usage
from gateway.stream.continuation import continuable
from gateway.stream.pipeline import ChunkPipeline
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import Message
from gateway.wire.openai_chat import Usage
from tests.upstreams.continuing_upstream import anthropic_events
from tests.upstreams.continuing_upstream import openai_events

# text with spaces, newlines and characters of one to four UTF-8 bytes
TEXT = st.text(alphabet=st.sampled_from("ab z\n\tüé—東京🍰."), min_size=1, max_size=60)


def _feed(pipeline: ChunkPipeline, decoder: SSEDecoder, blob: bytes, reads: list[int]) -> list:
    out, at = [], 0
    for size in [*reads, len(blob)]:
        part = blob[at : at + size]
        at += size
        if part:
            out += pipeline.run(decoder.feed(part), None)
    return out


def _assembled(sent: list[bytes]) -> tuple[str, list[str], int, set[str]]:
    """What a client makes of the bytes: text, finishes, roles, ids."""
    text, finishes, roles, ids = [], [], 0, set()
    for event in b"".join(sent).split(b"\n\n"):
        if not event.startswith(b"data: ") or event == b"data: [DONE]":
            continue
        chunk = json.loads(event[6:])
        ids.add(chunk["id"])
        for choice in chunk["choices"]:
            delta = choice["delta"]
            roles += "role" in delta
            text.append(delta.get("content") or "")
            if choice.get("finish_reason"):
                finishes.append(choice["finish_reason"])
    return "".join(text), finishes, roles, ids


@settings(max_examples=200, deadline=None)
@given(
    answer=TEXT,
    size=st.integers(1, 9),
    at=st.integers(0, 10**6),
    reads=st.lists(st.integers(1, 40), max_size=6),
    mode=st.sampled_from([PREFILL, CONTINUE_FINAL_MESSAGE, PREFIX]),
    rest_size=st.integers(1, 9),
)
def test_a_stream_continued_from_any_break_is_the_answer_exactly_once(
    answer: str, size: int, at: int, reads: list[int], mode: str, rest_size: int
) -> None:
    events = anthropic_events(answer, "claude-first", 20, size)
    blob = b"".join(events)
    first_text = len(b"".join(events[:3]))  # message_start, block start, the first delta
    cut = first_text + at % (len(blob) - first_text)
    acc = StreamAccumulator(id_seed="r")
    outbound = ChatOutbound(include_usage=True)
    pipeline = ChunkPipeline(AnthropicStreamTranslator(model="m", created=1), acc, outbound)
    sent = _feed(pipeline, SSEDecoder(), blob[:cut], reads)
    assert acc.output_seen
    assert continuable(acc)

    continuation = Continuation(acc, UpstreamProtocolError("the upstream closed the stream"))
    prefill, _ = continuation.prefill(mode)
    assert answer.startswith(prefill)
    if mode == PREFILL:
        assert prefill == prefill.rstrip()  # Anthropic refuses trailing whitespace
    request, body = continuation.request(
        ChatRequest(model="m", messages=[Message(role="user", content="q")], max_tokens=500),
        {"model": "m", "messages": [{"role": "user", "content": "q"}], "max_tokens": 500},
        mode,
    )
    if prefill:
        assert request.messages[-1].content == prefill == body["messages"][-1]["content"]
        assert body["messages"][-1].get("prefix") is (True if mode == PREFIX else None)
    assert isinstance(request.max_tokens, int)
    assert 0 < request.max_tokens <= 500

    # the continuing upstream answers from the end of the prefill
    rest = answer[len(prefill) :]
    if mode == PREFILL:
        second = anthropic_events(rest, "claude-second", 30, rest_size)
        inner: object = AnthropicStreamTranslator(model="m2", created=2)
    else:
        second = openai_events(rest, "vllm-second", 30, rest_size)
        inner = ChatStreamTranslator()
    acc.usage = acc.usage_chunk = None
    joined = continuation.translator(inner, mode)  # type: ignore[arg-type]
    pipeline = ChunkPipeline(joined, acc, outbound)
    decoder = SSEDecoder()
    sent += _feed(pipeline, decoder, b"".join(second), reads)
    sent += pipeline.run(decoder.close(), None, closing=True)
    assert joined.done
    sent.append(outbound.end(acc, None))

    text, finishes, roles, ids = _assembled(sent)
    assert text == answer
    assert "".join(acc.choices[0].content) == answer
    assert finishes == ["stop"]
    assert roles <= 1
    assert len(ids) == 1


def test_usage_of_the_attempts_is_summed() -> None:
    a = Usage(prompt_tokens=10, completion_tokens=4, total_tokens=14)
    b = Usage(prompt_tokens=12, completion_tokens=6, total_tokens=18)
    total = add_usage(a, b)
    assert total is not None
    assert (total.prompt_tokens, total.completion_tokens, total.total_tokens) == (22, 10, 32)
    assert add_usage(None, b) is b
    assert add_usage(a, None) is a


def test_a_break_after_a_tool_call_or_in_several_choices_is_not_continued() -> None:
    from gateway.wire.openai_chat import FunctionDelta
    from gateway.wire.openai_chat import ToolCallDelta

    acc = StreamAccumulator()
    acc.add(ChatChunk(id="c", choices=[ChunkChoice(index=0, delta=Delta(content="Let me "))]))
    assert continuable(acc)
    call = ToolCallDelta(index=0, id="call_1", type="function", function=FunctionDelta(name="f"))
    acc.add(ChatChunk(id="c", choices=[ChunkChoice(index=0, delta=Delta(tool_calls=[call]))]))
    assert not continuable(acc)

    several = StreamAccumulator(single_choice=False)
    for i in (0, 1):
        several.add(ChatChunk(id="c", choices=[ChunkChoice(index=i, delta=Delta(content="x"))]))
    assert not continuable(several)


def test_a_client_prefill_and_the_answer_so_far_are_one_assistant_turn() -> None:
    acc = StreamAccumulator()
    delta = Delta(role="assistant", content="the answer is ")
    acc.add(ChatChunk(id="c", choices=[ChunkChoice(index=0, delta=delta)]))
    continuation = Continuation(acc, UpstreamProtocolError("cut"))
    asked = ChatRequest(
        model="m",
        messages=[Message(role="user", content="q"), Message(role="assistant", content="Sure, ")],
    )
    body = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "Sure, "},
        ]
    }
    for mode, expected in ((PREFILL, "Sure, the answer is"), (PREFIX, "Sure, the answer is ")):
        request, sent = continuation.request(asked, body, mode)
        assert [m.role for m in request.messages] == ["user", "assistant"]
        assert request.messages[-1].content == expected
        assert [m["role"] for m in sent["messages"]] == ["user", "assistant"]
        assert sent["messages"][-1]["content"] == expected
    assert body["messages"][-1] == {"role": "assistant", "content": "Sure, "}  # not changed
