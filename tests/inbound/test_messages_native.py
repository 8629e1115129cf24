"""MessagesOutbound in passthrough (a native Anthropic attempt): recorded upstream streams run
through the real chunk pipeline (Anthropic translator, accumulator) leave event for event as
they came; the tail adds nothing; failures after the commit point are one `event: error`."""

from __future__ import annotations

import json

import pytest

from gateway.errors import InternalError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.framing.sse import encode_event
from gateway.inbound.messages_native import is_error_event
from gateway.inbound.messages_outbound import MessagesOutbound
from gateway.providers.anthropic.adapter import AnthropicStreamTranslator
from gateway.providers.base import UnaryResult
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.pipeline import ChunkPipeline
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from tests.fixtures import FIXTURES

SSE_FIXTURES = ["anthropic_text_then_tool.sse", "anthropic_text_then_two_tools.sse"]
DATA_FIXTURES = [
    "anthropic_text_tool_then_server_tool.data.jsonl",
    "anthropic_tool_no_args.data.jsonl",
]


class Spill:
    def __init__(self) -> None:
        self.pending: list[bytes] = []


def decode(raw: bytes) -> list[SSEEvent]:
    decoder = SSEDecoder()
    return [*decoder.feed(raw), *decoder.close()]


def data_only(name: str) -> bytes:
    """A data-only recording as the SSE body it was (no `event:` lines)."""
    lines = (FIXTURES / name).read_bytes().splitlines()
    return b"".join(b"data: " + line + b"\n\n" for line in lines if line.strip())


def native(model: str = "sonnet") -> MessagesOutbound:
    outbound = MessagesOutbound(message_id="msg_gw", model=model)
    outbound.start_attempt(native=True)
    return outbound


def pipeline(outbound: MessagesOutbound) -> ChunkPipeline:
    translator = AnthropicStreamTranslator(model="claude-up", created=1)
    return ChunkPipeline(translator, StreamAccumulator(), outbound)


def recorded(name: str) -> bytes:
    if name in DATA_FIXTURES:
        return data_only(name)
    return (FIXTURES / name).read_bytes()


@pytest.mark.parametrize("name", [*SSE_FIXTURES, *DATA_FIXTURES])
def test_recorded_streams_pass_through_event_for_event(name: str) -> None:
    body = recorded(name)
    frames = decode(body)
    outbound = native()
    pipe = pipeline(outbound)
    # one frame per call: each frame's bytes are that event's own re-encoding
    per_frame = [pipe.run([frame], None) for frame in frames]
    assert all(len(out) == 1 for out in per_frame)
    assert [out[0] for out in per_frame] == [
        encode_event(f.data, f.event or None, f.id) for f in frames
    ]
    assert [decode(out[0]) for out in per_frame] == [[f] for f in frames]
    # these recordings are written the way the gateway writes: the body comes out byte for
    # byte (one recording ends without the last event's blank line, which its end implies)
    assert b"".join(out[0] for out in per_frame) == body.rstrip(b"\n") + b"\n\n"
    assert pipe.translator.done
    tail = outbound.end(pipe.acc, pipe.usage_raw)
    assert tail == b""
    # the chunks were still made: usage and the calls reached the accumulator
    assert pipe.acc.usage is not None
    assert pipe.acc.usage.prompt_tokens > 0
    assert pipe.acc.output_seen


def test_chunks_are_not_encoded_in_passthrough() -> None:
    outbound = native()
    raw = (FIXTURES / "anthropic_text_then_tool.sse").read_bytes()
    out = pipeline(outbound).run(decode(raw), None)
    text = b"".join(out)
    assert b"msg_gw" not in text  # the gateway's own message id appears nowhere
    assert text.count(b"event: message_start") == 1
    assert b'"id":"msg_019Q1hrJbZG26Fb9BQhrkHEr"' in text
    assert b'"model":"claude-sonnet-4-20250514"' in text


def test_a_chunk_never_reaches_a_passthrough_outbound_by_mistake() -> None:
    """Sanity of the test above: the translated path would have started the gateway's own
    message, so an outbound that encoded chunks in passthrough would be caught."""
    outbound = MessagesOutbound(message_id="msg_gw", model="sonnet")
    outbound.start_attempt(native=False)
    chunk = ChatChunk(choices=[ChunkChoice(delta=Delta(content="x"))])
    assert b"msg_gw" in outbound.chunk(chunk, None)


def test_upstream_error_event_passes_through_and_the_gateway_adds_none() -> None:
    outbound = native()
    pipe = pipeline(outbound)
    text_part = decode((FIXTURES / "anthropic_text_then_tool.sse").read_bytes())[:5]
    error_raw = (FIXTURES / "anthropic_error_event.sse").read_bytes()
    spill = Spill()
    assert len(pipe.run(text_part, spill)) == 5
    with pytest.raises(UpstreamStreamError) as info:
        pipe.run(decode(error_raw), spill)
    assert spill.pending == [error_raw]  # the upstream's own error event, as recorded
    assert outbound.error(info.value) == b""


def test_error_after_commit_without_an_upstream_error_event() -> None:
    outbound = native()
    pipe = pipeline(outbound)
    pipe.run(decode((FIXTURES / "anthropic_text_then_tool.sse").read_bytes())[:5], Spill())
    out = outbound.error(UpstreamProtocolError("the upstream closed the stream before it finished"))
    name, data = out.decode().rstrip("\n").split("\n")
    assert name == "event: error"
    error = json.loads(data.removeprefix("data: "))
    assert error["type"] == "error"
    assert error["error"]["type"] == "api_error"
    assert "closed the stream" in error["error"]["message"]


def test_a_data_only_error_event_is_recognised() -> None:
    data = b'{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
    assert is_error_event(SSEEvent(data=data))
    assert not is_error_event(SSEEvent(data=b'{"type":"text_delta","text":"\\"error\\""}'))
    assert not is_error_event(SSEEvent(data=b'{"type": "ping"}', event="ping"))
    assert not is_error_event(SSEEvent(data=b'"error" {not json'))


def test_a_new_attempt_forgets_the_previous_one() -> None:
    """A native attempt that failed before the commit (its error event went nowhere) is
    followed by a translated one: that one encodes chunks and ends with its own tail."""
    outbound = native()
    pipe = pipeline(outbound)
    with pytest.raises(UpstreamStreamError):
        pipe.run(decode((FIXTURES / "anthropic_error_event.sse").read_bytes()), Spill())
    outbound.start_attempt(native=False)
    assert not outbound.passthrough
    acc = StreamAccumulator()
    chunk = acc.add(ChatChunk(choices=[ChunkChoice(delta=Delta(content="hi"))]))
    assert chunk is not None
    head = outbound.chunk(chunk, None)
    assert head.startswith(b"event: message_start")
    assert b'"id":"msg_gw"' in head
    acc.add(ChatChunk(choices=[ChunkChoice(delta=Delta(), finish_reason="stop")]))
    tail = outbound.end(acc, None)
    assert b"event: message_stop" in tail
    # and its failure is the gateway's error event again
    assert outbound.error(UpstreamProtocolError("x")).startswith(b"event: error")


def test_unary_messages_body_is_passed_through() -> None:
    raw = b'{"id": "msg_up",  "type": "message", "content": [], "model": "claude-up"}'
    outbound = MessagesOutbound(message_id="msg_gw", model="sonnet")
    assert (
        outbound.unary(UnaryResult(body=raw, usage=None, model="claude-up", api="messages")) == raw
    )


def test_accumulating_a_native_attempt_is_refused() -> None:
    outbound = native()
    with pytest.raises(InternalError):
        outbound.completion(StreamAccumulator(), id="x", model="m", created=1)
