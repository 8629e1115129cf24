"""Non-streaming Responses objects, and native (Responses upstream) frames passed through."""

from __future__ import annotations

import json

import pytest

from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.providers.base import UnaryResult
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import encoder
from tests.fixtures import FIXTURES
from tests.inbound.responses_chunks import USAGE
from tests.inbound.responses_chunks import call
from tests.inbound.responses_chunks import chunk
from tests.inbound.responses_chunks import decode
from tests.inbound.responses_chunks import outbound
from tests.inbound.responses_chunks import run
from tests.inbound.responses_chunks import types

# --- non-streaming ----------------------------------------------------------------------------


def test_completion_from_the_accumulator() -> None:
    ob = outbound()
    ob.start_attempt(native=False)
    acc = StreamAccumulator()
    for c in [
        chunk(reasoning="hmm"),
        chunk(content="Sure."),
        chunk(calls=[call(0, "", id="call_a", name="a")]),
        chunk(calls=[call(1, "", id="call_b", name="b")]),
        chunk(calls=[call(1, "{}")]),
        chunk(calls=[call(0, '{"x":1}')]),
        chunk(finish="tool_calls"),
        ChatChunk(usage=USAGE),
    ]:
        acc.add(c)
    response = json.loads(ob.completion(acc, id="x", model="up-model", created=1))
    assert response["object"] == "response"
    assert response["id"] == "resp_abc"
    assert response["model"] == "smart"
    assert response["status"] == "completed"
    output = response["output"]
    assert [i["type"] for i in output] == ["reasoning", "message", "function_call", "function_call"]
    assert output[1]["content"][0]["text"] == "Sure."
    assert [(i["call_id"], i["arguments"]) for i in output[2:]] == [
        ("call_a", '{"x":1}'),
        ("call_b", "{}"),
    ]
    assert len({i["id"] for i in output}) == 4
    assert response["usage"]["input_tokens_details"] == {"cached_tokens": 4}
    assert ob.finished is not None
    assert ob.finished.output == output


def test_unary_chat_completion_becomes_a_response() -> None:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "up",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    ob = outbound()
    response = json.loads(ob.unary(UnaryResult(body=encoder.encode(body), usage=None, model="up")))
    assert [(i["type"], i["call_id"], i["name"]) for i in response["output"]] == [
        ("function_call", "call_1", "f")
    ]
    assert response["usage"]["total_tokens"] == 7
    assert response["usage"]["input_tokens_details"] == {"cached_tokens": 0}


def test_unary_length_finish_is_incomplete() -> None:
    body = {
        "id": "c",
        "created": 1,
        "model": "up",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "cu"},
                "finish_reason": "length",
            }
        ],
    }
    response = json.loads(
        outbound().unary(UnaryResult(body=encoder.encode(body), usage=None, model="up"))
    )
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": "max_output_tokens"}
    assert response["output"][0]["content"][0]["text"] == "cu"


# --- native (passthrough) ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["openai_responses_function_calls.sse", "openai_responses_reasoning_then_function_call.sse"],
)
def test_passthrough_frames_leave_unchanged(name: str) -> None:
    raw = (FIXTURES / name).read_bytes()
    decoder = SSEDecoder()
    frames = decoder.feed(raw) + decoder.close()
    ob = outbound()
    ob.start_attempt(native=True)
    assert ob.passthrough
    out = b"".join(ob.frame(f) for f in frames)
    out += ob.end(StreamAccumulator(), None)
    again = SSEDecoder()
    assert again.feed(out) + again.close() == frames
    assert out == b"".join(f"event: {f.event}\ndata: ".encode() + f.data + b"\n\n" for f in frames)
    completed = json.loads(frames[-1].data)["response"]
    assert ob.finished is not None
    assert ob.finished.id == completed["id"]
    assert ob.finished.output == completed["output"]
    assert ob.error(UpstreamStreamError("late")) == b""  # the upstream's terminal event went out
    assert json.loads(ob.completion(StreamAccumulator(), id="x", model="m", created=1)) == completed


def test_passthrough_failure_mid_stream_is_response_failed_with_the_upstream_id() -> None:
    raw = (FIXTURES / "openai_responses_function_calls.sse").read_bytes()
    decoder = SSEDecoder()
    frames = (decoder.feed(raw) + decoder.close())[:10]
    ob = outbound()
    ob.start_attempt(native=True)
    for f in frames:
        ob.frame(f)
    (event,) = decode(ob.error(UpstreamStreamError("cut")))
    upstream_id = json.loads(frames[0].data)["response"]["id"]
    assert event[0] == "response.failed"
    assert event[1]["sequence_number"] == 10
    assert event[1]["response"]["id"] == upstream_id
    assert event[1]["response"]["error"]["message"] == "cut"
    assert ob.finished is None


def test_passthrough_unary_body_is_forwarded_and_kept() -> None:
    raw = (FIXTURES / "openai_responses_function_calls.sse").read_bytes()
    decoder = SSEDecoder()
    completed = (decoder.feed(raw) + decoder.close())[-1]
    body = json.dumps(json.loads(completed.data)["response"]).encode()
    ob = outbound()
    ob.start_attempt(native=False)  # non-streaming native calls never stream
    assert ob.unary(UnaryResult(body=body, usage=None, model="m", api="responses")) == body
    assert ob.finished is not None
    assert ob.finished.output == json.loads(body)["output"]


def test_a_translated_attempt_after_a_native_one_translates_again() -> None:
    ob = outbound()
    ob.start_attempt(native=True)
    events = run(ob, [chunk(content="x"), chunk(finish="stop")])
    assert not ob.passthrough
    assert types(events)[0] == "created"


def test_passthrough_malformed_lifecycle_frame_is_a_protocol_error() -> None:
    ob = outbound()
    ob.start_attempt(native=True)
    with pytest.raises(UpstreamProtocolError):
        ob.frame(SSEEvent(data=b'{"type":"response.created"}', event="response.created"))


def test_passthrough_failure_before_any_frame_starts_the_response_itself() -> None:
    ob = outbound()
    ob.start_attempt(native=True)
    events = decode(ob.error(UpstreamStreamError("nothing came")))
    assert types(events) == ["created", "in_progress", "failed"]
    assert [e["sequence_number"] for _, e in events] == [0, 1, 2]
    assert events[-1][1]["response"]["id"] == "resp_abc"
