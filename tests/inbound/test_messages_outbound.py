"""Canonical chunks -> Anthropic Messages events and messages: event order, block indexes,
interleaved parallel calls, stop reasons, usage, errors, and the non-streaming message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.errors import AuthenticationFailed
from gateway.errors import BadRequest
from gateway.errors import BodyTooLarge
from gateway.errors import GatewayError
from gateway.errors import NotFound
from gateway.errors import NoUpstreamAvailable
from gateway.errors import PermissionDenied
from gateway.errors import RateLimited
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamTimeout
from gateway.inbound.messages_outbound import KEEPALIVE
from gateway.inbound.messages_outbound import MessagesOutbound
from gateway.inbound.messages_outbound import error_json
from gateway.providers.base import UnaryResult
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage

USAGE = Usage(
    prompt_tokens=30,
    completion_tokens=7,
    total_tokens=37,
    prompt_tokens_details=PromptTokensDetails(cached_tokens=10),
)


def events(data: bytes) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in data.decode().split("\n\n"):
        if not frame:
            continue
        name_line, data_line = frame.split("\n")
        assert name_line.startswith("event: ")
        assert data_line.startswith("data: ")
        payload = json.loads(data_line.removeprefix("data: "))
        assert payload["type"] == name_line.removeprefix("event: ")
        out.append((payload["type"], payload))
    return out


def chunk(
    *,
    content: str | None = None,
    reasoning: str | None = None,
    calls: list[ToolCallDelta] | None = None,
    finish: str | None = None,
    usage: Usage | None = None,
) -> ChatChunk:
    delta = Delta()
    if content is not None:
        delta.content = content
    if reasoning is not None:
        delta.reasoning_content = reasoning
    if calls is not None:
        delta.tool_calls = calls
    choice = ChunkChoice(delta=delta)
    if finish is not None:
        choice.finish_reason = finish
    c = ChatChunk(id="c1", model="up-model", choices=[choice])
    if usage is not None:
        c.usage = usage
    return c


def start(index: int, call_id: str, name: str | None, args: str = "") -> ToolCallDelta:
    fn = FunctionDelta(arguments=args) if name is None else FunctionDelta(name=name, arguments=args)
    return ToolCallDelta(index=index, id=call_id, type="function", function=fn)


def args(index: int, text: str) -> ToolCallDelta:
    return ToolCallDelta(index=index, function=FunctionDelta(arguments=text))


def run(chunks: list[ChatChunk]) -> tuple[list[tuple[str, dict[str, Any]]], StreamAccumulator]:
    """The chunks through an accumulator and the outbound, as the actor does it."""
    out = MessagesOutbound(message_id="msg_r1", model="client-model")
    acc = StreamAccumulator(id_seed="r1")
    data = b""
    for c in chunks:
        fixed = acc.add(c)
        if fixed is not None:
            data += out.chunk(fixed, None)
    data += out.end(acc, None)
    return events(data), acc


def check_blocks(evs: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each block starts, gets its deltas and stops before the next starts, indexes counting
    up from 0; returns the blocks with their deltas joined."""
    blocks: list[dict[str, Any]] = []
    open_index = None
    for kind, e in evs:
        if kind == "content_block_start":
            assert open_index is None
            assert e["index"] == len(blocks)
            open_index = e["index"]
            blocks.append({**e["content_block"], "deltas": ""})
        elif kind == "content_block_delta":
            assert e["index"] == open_index
            delta = e["delta"]
            key = {"text_delta": "text", "input_json_delta": "partial_json"}.get(
                delta["type"], "thinking"
            )
            blocks[-1]["deltas"] += delta[key]
        elif kind == "content_block_stop":
            assert e["index"] == open_index
            open_index = None
    assert open_index is None
    return blocks


def test_text_stream_event_sequence() -> None:
    evs, _ = run(
        [
            chunk(content=""),
            chunk(content="Hel"),
            chunk(content="lo"),
            chunk(finish="stop"),
            ChatChunk(id="c1", usage=USAGE),
        ]
    )
    assert [k for k, _ in evs] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    message = evs[0][1]["message"]
    assert message["id"] == "msg_r1"
    assert message["model"] == "client-model"
    assert message["content"] == []
    assert message["usage"] == {"input_tokens": 0, "output_tokens": 0}
    assert evs[1][1]["content_block"] == {"type": "text", "text": ""}
    assert evs[2][1]["delta"] == {"type": "text_delta", "text": "Hel"}
    assert evs[5][1] == {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": None},
        "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 10},
    }


def test_text_then_two_contiguous_calls_are_blocks_0_1_2() -> None:
    evs, _ = run(
        [
            chunk(content="Let me check."),
            chunk(calls=[start(0, "call_a", "get_weather")]),
            chunk(calls=[args(0, '{"city":')]),
            chunk(calls=[args(0, '"Paris"}')]),
            chunk(calls=[start(1, "call_b", "get_time", '{"tz":"CET"}')]),
            chunk(finish="tool_calls"),
        ]
    )
    blocks = check_blocks(evs)
    assert blocks == [
        {"type": "text", "text": "", "deltas": "Let me check."},
        {
            "type": "tool_use",
            "id": "call_a",
            "name": "get_weather",
            "input": {},
            "deltas": '{"city":"Paris"}',
        },
        {
            "type": "tool_use",
            "id": "call_b",
            "name": "get_time",
            "input": {},
            "deltas": '{"tz":"CET"}',
        },
    ]
    assert evs[-2][1]["delta"]["stop_reason"] == "tool_use"


def test_interleaved_parallel_calls_each_get_their_own_deltas() -> None:
    a = {"query": "quarterly report", "limit": 5}
    b = {"user_id": "u-42", "fields": ["name", "email"]}
    pieces_a = [json.dumps(a)[i : i + 5] for i in range(0, len(json.dumps(a)), 5)]
    pieces_b = [json.dumps(b)[i : i + 5] for i in range(0, len(json.dumps(b)), 5)]
    chunks = [
        chunk(calls=[start(0, "call_0", "search")]),
        chunk(calls=[start(1, "call_1", "get_user")]),
    ]
    for i in range(max(len(pieces_a), len(pieces_b))):
        if i < len(pieces_a):
            chunks.append(chunk(calls=[args(0, pieces_a[i])]))
        if i < len(pieces_b):
            chunks.append(chunk(calls=[args(1, pieces_b[i])]))
    chunks.append(chunk(finish="tool_calls"))
    evs, _ = run(chunks)
    blocks = check_blocks(evs)
    assert [(x["id"], x["name"], json.loads(x["deltas"])) for x in blocks] == [
        ("call_0", "search", a),
        ("call_1", "get_user", b),
    ]
    # the first call streamed live: some of its deltas left before the second call's start
    first_stop = next(i for i, (k, _) in enumerate(evs) if k == "content_block_stop")
    assert sum(1 for k, e in evs[:first_stop] if k == "content_block_delta") == len(pieces_a)


def test_both_calls_in_one_chunk_and_text_after_calls() -> None:
    evs, _ = run(
        [
            chunk(calls=[start(0, "c0", "f", '{"a":'), start(1, "c1", "g", '{"b":')]),
            chunk(content="interim"),
            chunk(calls=[args(1, "2}"), args(0, "1}")]),
            chunk(finish="tool_calls"),
        ]
    )
    blocks = check_blocks(evs)
    assert [(x["type"], x["deltas"]) for x in blocks] == [
        ("tool_use", '{"a":1}'),
        ("tool_use", '{"b":2}'),
        ("text", "interim"),
    ]


def test_a_call_whose_name_comes_late_starts_with_its_name() -> None:
    evs, _ = run(
        [
            chunk(calls=[start(0, "c0", None, '{"x"')]),
            chunk(
                calls=[ToolCallDelta(index=0, function=FunctionDelta(name="late", arguments=":1}"))]
            ),
            chunk(finish="tool_calls"),
        ]
    )
    assert check_blocks(evs) == [
        {"type": "tool_use", "id": "c0", "name": "late", "input": {}, "deltas": '{"x":1}'}
    ]


def test_thinking_then_text() -> None:
    evs, _ = run(
        [
            chunk(reasoning="Let me think"),
            chunk(reasoning="."),
            chunk(content="42"),
            chunk(finish="stop"),
        ]
    )
    blocks = check_blocks(evs)
    assert blocks == [
        {"type": "thinking", "thinking": "", "signature": "", "deltas": "Let me think."},
        {"type": "text", "text": "", "deltas": "42"},
    ]
    deltas = [e["delta"]["type"] for k, e in evs if k == "content_block_delta"]
    assert deltas == ["thinking_delta", "thinking_delta", "text_delta"]


@pytest.mark.parametrize(
    ("finish", "stop"),
    [
        ("stop", "end_turn"),
        ("length", "max_tokens"),
        ("content_filter", "refusal"),
        (None, "end_turn"),
    ],
)
def test_stop_reasons(finish: str | None, stop: str) -> None:
    chunks = [chunk(content="x")] + ([chunk(finish=finish)] if finish else [])
    evs, _ = run(chunks)
    assert evs[-2][1]["delta"]["stop_reason"] == stop
    assert evs[-1][0] == "message_stop"


def test_an_empty_stream_is_still_a_whole_message() -> None:
    out = MessagesOutbound(message_id="msg_x", model="m")
    evs = events(out.end(StreamAccumulator(), None))
    assert [k for k, _ in evs] == ["message_start", "message_delta", "message_stop"]


def test_a_new_attempt_starts_over() -> None:
    out = MessagesOutbound(message_id="msg_x", model="m")
    out.chunk(chunk(content="lost"), None)
    out.start_attempt(False)
    evs = events(out.chunk(chunk(content="kept"), None))
    assert [k for k, _ in evs][:2] == ["message_start", "content_block_start"]
    assert evs[1][1]["index"] == 0


def test_post_commit_error_and_keepalive() -> None:
    out = MessagesOutbound(message_id="msg_x", model="m")
    data = out.error(UpstreamError("the upstream broke"))
    assert data == (
        b'event: error\ndata: {"type":"error","error":{"type":"api_error",'
        b'"message":"the upstream broke"}}\n\n'
    )
    assert KEEPALIVE == b'event: ping\ndata: {"type": "ping"}\n\n'


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (BadRequest("bad", param="messages[0].content[1].type"), "invalid_request_error"),
        (AuthenticationFailed("no key"), "authentication_error"),
        (PermissionDenied("no"), "permission_error"),
        (NotFound("none"), "not_found_error"),
        (BodyTooLarge("big"), "request_too_large"),
        (RateLimited("slow"), "rate_limit_error"),
        (UpstreamError("broke"), "api_error"),
        (NoUpstreamAvailable("none"), "overloaded_error"),
        (UpstreamTimeout("late"), "timeout_error"),
    ],
)
def test_error_shape(err: GatewayError, kind: str) -> None:
    body = json.loads(error_json(err))
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert body["error"]["type"] == kind
    if err.param:
        assert body["error"]["message"] == f"{err.param}: {err.message}"


def test_overloaded_upstream_status() -> None:
    err = UpstreamError("overloaded")
    err.status = 529
    assert json.loads(error_json(err))["error"]["type"] == "overloaded_error"


def test_non_streaming_message_from_the_accumulator() -> None:
    _, acc = run(
        [
            chunk(reasoning="hmm"),
            chunk(content="Here."),
            chunk(calls=[start(0, "c0", "f", '{"a": [1, 2]}')]),
            chunk(calls=[start(1, "c1", "g", "")]),
            chunk(finish="stop", usage=USAGE),
        ]
    )
    out = MessagesOutbound(message_id="msg_u", model="client-model")
    message = json.loads(out.completion(acc, id="x", model="up", created=0))
    assert message == {
        "id": "msg_u",
        "model": "client-model",
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": ""},
            {"type": "text", "text": "Here."},
            {"type": "tool_use", "id": "c0", "name": "f", "input": {"a": [1, 2]}},
            {"type": "tool_use", "id": "c1", "name": "g", "input": {}},
        ],
        "usage": {"input_tokens": 20, "output_tokens": 7, "cache_read_input_tokens": 10},
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "type": "message",
        "role": "assistant",
    }


def test_non_streaming_message_from_a_chat_completion() -> None:
    completion = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "gpt",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "Hi", "unknown": 1},
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    out = MessagesOutbound(message_id="msg_u", model="m")
    message = json.loads(
        out.unary(UnaryResult(body=json.dumps(completion).encode(), usage=None, model="gpt"))
    )
    assert message["content"] == [{"type": "text", "text": "Hi"}]
    assert message["stop_reason"] == "max_tokens"
    assert message["usage"] == {"input_tokens": 5, "output_tokens": 2}


def test_non_streaming_bad_arguments_or_body_are_upstream_errors() -> None:
    completion = {
        "id": "x",
        "created": 1,
        "model": "gpt",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c",
                            "type": "function",
                            "function": {"name": "f", "arguments": "[1]"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
    }
    out = MessagesOutbound(message_id="msg_u", model="m")
    with pytest.raises(UpstreamProtocolError):
        out.unary(UnaryResult(body=json.dumps(completion).encode(), usage=None, model=None))
    with pytest.raises(UpstreamProtocolError):
        out.unary(UnaryResult(body=b"{not json", usage=None, model=None))
