"""Anthropic adapter: the stream translator on recorded streams, the non-streaming answer,
error mapping and the upstream request (URL, headers)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStatusError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.providers.anthropic.adapter import AnthropicAdapter
from gateway.providers.anthropic.adapter import AnthropicStreamTranslator
from gateway.providers.base import UpstreamCall
from gateway.providers.registry import make_adapter
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.upstream.retries import transient
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from tests.fixtures import FIXTURES
from tests.providers.stream_view import client_chunks

SSE_FIXTURES = ["anthropic_text_then_tool.sse", "anthropic_text_then_two_tools.sse"]
DATA_FIXTURES = [
    "anthropic_text_tool_then_server_tool.data.jsonl",
    "anthropic_tool_no_args.data.jsonl",
]


def provider(base_url: str | None = None) -> ProviderConfig:
    return provider_config(
        name="claude",
        kind="anthropic",
        base_url=base_url,
        keys=[ProviderKey(key=Secret("sk-ant-test"))],
    )


def make_call(body: dict[str, Any] | None = None, *, stream: bool = True) -> UpstreamCall:
    body = body or {"model": "claude", "messages": [{"role": "user", "content": "hi"}]}
    return UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=provider(),
        key=ProviderKey(key=Secret("sk-ant-test")),
        model="claude-sonnet-4-5",
        stream=stream,
        request_id="req1",
        created=1700000000,
    )


def sse_events(data: bytes, cuts: list[int] | None = None) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    start = 0
    for cut in sorted(cuts or []):
        events += decoder.feed(data[start:cut])
        start = cut
    events += decoder.feed(data[start:])
    return events + decoder.close()


def fixture_events(name: str) -> list[SSEEvent]:
    path: Path = FIXTURES / name
    if name.endswith(".jsonl"):
        return [SSEEvent(data=line) for line in path.read_bytes().splitlines() if line.strip()]
    return sse_events(path.read_bytes())


def translate(events: list[SSEEvent], answer_tool: str | None = None) -> list[ChatChunk]:
    """The chunks the client sees (`client_chunks`: tool calls numbered per stream)."""
    translator = AnthropicStreamTranslator(model="m", created=1, answer_tool=answer_tool)
    chunks = [t.chunk for e in events for t in translator.feed(e)] + [
        t.chunk for t in translator.close()
    ]
    assert translator.done
    return client_chunks(chunks)


def accumulate(chunks: list[ChatChunk]) -> StreamAccumulator:
    acc = StreamAccumulator()
    for chunk in chunks:
        acc.add(chunk)
    return acc


def tool_deltas(chunks: list[ChatChunk]) -> list[Any]:
    return [
        tc
        for c in chunks
        for ch in c.choices
        if ch.delta.tool_calls
        for tc in ch.delta.tool_calls  # type: ignore[union-attr]
    ]


# --- stream translation --------------------------------------------------------------------


def test_text_then_tool_gets_index_0() -> None:
    chunks = translate(fixture_events("anthropic_text_then_tool.sse"))
    first = chunks[0]
    assert first.id == "msg_019Q1hrJbZG26Fb9BQhrkHEr"
    assert first.model == "claude-sonnet-4-20250514"
    assert first.choices[0].delta.role == "assistant"
    deltas = tool_deltas(chunks)
    assert {d.index for d in deltas} == {0}
    assert deltas[0].id == "toolu_01NRLabsLyVHZPKxbKvkfSMn"
    assert deltas[0].type == "function"
    assert deltas[0].function.name == "get_weather"
    assert deltas[0].function.arguments == ""
    message = accumulate(chunks).message()
    assert message.content == "I'll check the current weather in Paris for you."
    assert message.tool_calls is not UNSET
    assert json.loads(message.tool_calls[0].function.arguments) == {"location": "Paris"}


def test_text_then_two_tools_indexes_0_1_and_usage() -> None:
    chunks = translate(fixture_events("anthropic_text_then_two_tools.sse"))
    starts = [d for d in tool_deltas(chunks) if d.id is not UNSET]
    assert [d.index for d in starts] == [0, 1]
    acc = accumulate(chunks)
    calls = acc.message().tool_calls
    assert calls is not UNSET
    assert [json.loads(c.function.arguments) for c in calls] == [{"count": 1}, {"count": 2}]
    finishes = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finishes == ["tool_calls"]
    usage_chunks = [c for c in chunks if c.usage is not UNSET]
    assert len(usage_chunks) == 1
    assert usage_chunks[0].choices == []
    usage = usage_chunks[0].usage
    assert usage is not UNSET
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (418, 114, 532)
    assert chunks[-1] is usage_chunks[0]


def test_server_tool_use_is_not_a_call() -> None:
    chunks = translate(fixture_events("anthropic_text_tool_then_server_tool.data.jsonl"))
    deltas = tool_deltas(chunks)
    assert {d.index for d in deltas} == {0}
    assert all(d.id in (UNSET, "toolu_01U8pzAHj2vNdPCA2Kf8JjeN") for d in deltas)
    message = accumulate(chunks).message()
    assert message.tool_calls is not UNSET
    assert len(message.tool_calls) == 1
    assert json.loads(message.tool_calls[0].function.arguments) == {
        "noteId": "d10aa585-982b-4bd9-984e-420f9b3717f7"
    }
    assert "query" not in (message.content or "")


def test_tool_without_arguments_ends_with_empty_object() -> None:
    chunks = translate(fixture_events("anthropic_tool_no_args.data.jsonl"))
    acc = accumulate(chunks)
    calls = acc.message().tool_calls
    assert calls is not UNSET
    assert [c.function.arguments for c in calls] == ["{}"]
    assert calls[0].function.name == "updateIssueList"
    assert acc.usage is not None
    assert (acc.usage.prompt_tokens, acc.usage.completion_tokens) == (565, 48)


def test_error_event_is_a_retryable_stream_error() -> None:
    translator = AnthropicStreamTranslator(model="m", created=1)
    (event,) = fixture_events("anthropic_error_event.sse")
    assert event.event == "error"
    with pytest.raises(UpstreamStreamError) as info:
        translator.feed(event)
    assert info.value.retryable
    assert info.value.code == "overloaded_error"
    assert info.value.message == "Overloaded"
    assert transient(info.value)  # worth the same target again (routing.retries_per_target)


@pytest.mark.parametrize(
    ("kind", "same_target"),
    [("overloaded_error", True), ("api_error", True), ("rate_limit_error", False)],
)
def test_which_error_events_are_tried_again_on_the_same_target(
    kind: str, same_target: bool
) -> None:
    translator = AnthropicStreamTranslator(model="m", created=1)
    event = {"type": "error", "error": {"type": kind, "message": "x"}}
    with pytest.raises(UpstreamStreamError) as info:
        translator.feed(SSEEvent(event="error", data=json.dumps(event).encode()))
    assert transient(info.value) is same_target


def data(*events: dict[str, Any]) -> list[SSEEvent]:
    return [SSEEvent(data=json.dumps(e).encode()) for e in events]


START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "model": "claude-x",
        "content": [],
        "usage": {
            "input_tokens": 10,
            "cache_read_input_tokens": 100,
            "cache_creation_input_tokens": 5,
            "output_tokens": 1,
        },
    },
}
STOP = {"type": "message_stop"}


def block(index: int, **content: Any) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": content}


def delta(index: int, **d: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": d}


def message_delta(stop_reason: str, output: int) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"stop_reason": stop_reason},
        "usage": {"output_tokens": output},
    }


def test_thinking_goes_to_reasoning_and_cache_usage() -> None:
    chunks = translate(
        data(
            START,
            block(0, type="thinking", thinking=""),
            delta(0, type="thinking_delta", thinking="let me think"),
            delta(0, type="signature_delta", signature="sig"),
            {"type": "content_block_stop", "index": 0},
            block(1, type="text", text=""),
            delta(1, type="text_delta", text="answer"),
            {"type": "content_block_stop", "index": 1},
            message_delta("end_turn", 3),
            message_delta("end_turn", 7),  # cumulative: the last one counts
            STOP,
        )
    )
    acc = accumulate(chunks)
    message = acc.message()
    assert message.content == "answer"
    assert message.reasoning_content == "let me think"
    assert all(
        ch.delta.content in (UNSET, "", "answer") for c in chunks for ch in c.choices
    )  # thinking never reaches content
    assert acc.usage is not None
    assert acc.usage.prompt_tokens == 115
    assert acc.usage.completion_tokens == 7
    assert acc.usage.total_tokens == 122
    details = acc.usage.prompt_tokens_details
    assert details is not UNSET
    assert details is not None
    assert details.cached_tokens == 100


@pytest.mark.parametrize(
    ("stop_reason", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("refusal", "content_filter"),
        ("something_new", "stop"),
    ],
)
def test_finish_reasons(stop_reason: str, finish: str) -> None:
    chunks = translate(
        data(
            START,
            block(0, type="text", text=""),
            delta(0, type="text_delta", text="x"),
            message_delta(stop_reason, 2),
            STOP,
        )
    )
    finishes = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]
    assert finishes == [finish]


def test_event_name_is_used_only_without_a_data_type_and_unknown_events_ignored() -> None:
    translator = AnthropicStreamTranslator(model="m", created=1)
    assert translator.feed(SSEEvent(data=b'{"type":"ping"}', event="ping")) == []
    assert translator.feed(SSEEvent(data=b'{"type":"brand_new"}', event="brand_new")) == []
    assert translator.feed(SSEEvent(data=b"", event="ping")) == []
    out = translator.feed(SSEEvent(data=b"{}", event="message_stop"))
    assert translator.done
    assert out[0].chunk.choices[0].finish_reason == "stop"
    assert translator.feed(SSEEvent(data=b'{"type":"message_stop"}')) == []  # one finish only


def test_malformed_event_is_a_protocol_error() -> None:
    translator = AnthropicStreamTranslator(model="m", created=1)
    with pytest.raises(UpstreamProtocolError):
        translator.feed(SSEEvent(data=b"{not json"))


def test_answer_tool_becomes_content() -> None:
    chunks = translate(
        data(
            START,
            block(0, type="tool_use", id="toolu_1", name="answer", input={}),
            delta(0, type="input_json_delta", partial_json='{"a": '),
            delta(0, type="input_json_delta", partial_json="1}"),
            {"type": "content_block_stop", "index": 0},
            message_delta("tool_use", 5),
            STOP,
        ),
        answer_tool="answer",
    )
    acc = accumulate(chunks)
    assert acc.message().content == '{"a": 1}'
    assert acc.message().tool_calls is UNSET
    assert acc.choices[0].finish_reason == "stop"


ALL_FIXTURES = [*SSE_FIXTURES, "anthropic_error_event.sse"]


def final_state(data_bytes: bytes, cuts: list[int]) -> tuple[Any, ...]:
    translator = AnthropicStreamTranslator(model="m", created=1)
    acc = StreamAccumulator()
    chunks: list[bytes] = []
    try:
        for event in sse_events(data_bytes, cuts):
            for item in translator.feed(event):
                chunks.append(msgspec.json.encode(item.chunk))
                acc.add(item.chunk)
        error = None
    except UpstreamStreamError as exc:
        error = (exc.code, exc.message)
    message = msgspec.json.encode(acc.message())
    return chunks, message, msgspec.json.encode(acc.usage), error


@pytest.mark.parametrize("name", ALL_FIXTURES)
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_split_anywhere_same_chunks(name: str, cuts: list[int]) -> None:
    blob = (FIXTURES / name).read_bytes()
    cuts = [c % (len(blob) + 1) for c in cuts]
    assert final_state(blob, cuts) == final_state(blob, [])


# --- non-streaming ---------------------------------------------------------------------------

UNARY = {
    "id": "msg_019TRvczheYztAPERcbH1sWv",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-20250514",
    "content": [
        {"type": "thinking", "thinking": "hmm", "signature": "s"},
        {"type": "text", "text": "I'll use the tool."},
        {"type": "tool_use", "id": "toolu_a", "name": "test_tool", "input": {"count": 1}},
        {"type": "server_tool_use", "id": "srvtoolu_b", "name": "web_search", "input": {"q": 1}},
        {"type": "tool_use", "id": "toolu_c", "name": "noargs", "input": {}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 418, "output_tokens": 114, "cache_read_input_tokens": 2},
}


def test_unary_result() -> None:
    adapter = AnthropicAdapter(provider())
    result = adapter.unary_result(make_call(stream=False), json.dumps(UNARY).encode())
    body = json.loads(result.body)
    assert body["object"] == "chat.completion"
    assert body["id"] == "msg_019TRvczheYztAPERcbH1sWv"
    assert result.model == body["model"] == "claude-sonnet-4-20250514"
    choice = body["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    message = choice["message"]
    assert message["content"] == "I'll use the tool."
    assert message["reasoning_content"] == "hmm"
    calls = message["tool_calls"]
    assert [c["id"] for c in calls] == ["toolu_a", "toolu_c"]
    assert [json.loads(c["function"]["arguments"]) for c in calls] == [{"count": 1}, {}]
    assert all(c["type"] == "function" for c in calls)
    assert body["usage"]["prompt_tokens"] == 420
    assert body["usage"]["completion_tokens"] == 114
    assert body["usage"]["prompt_tokens_details"] == {"cached_tokens": 2}
    assert result.usage is not None
    assert result.usage.total_tokens == 534


def test_unary_text_only_and_answer_tool() -> None:
    adapter = AnthropicAdapter(provider())
    text = {**UNARY, "content": [{"type": "text", "text": "hi"}], "stop_reason": "max_tokens"}
    body = json.loads(adapter.unary_result(make_call(), json.dumps(text).encode()).body)
    assert body["choices"][0]["message"] == {"role": "assistant", "content": "hi"}
    assert body["choices"][0]["finish_reason"] == "length"
    request = {
        "model": "claude",
        "messages": [{"role": "user", "content": "hi"}],
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {}}},
    }
    answer = {
        **UNARY,
        "content": [{"type": "tool_use", "id": "t", "name": "out", "input": {"x": "y"}}],
    }
    result = adapter.unary_result(make_call(request), json.dumps(answer).encode())
    message = json.loads(result.body)["choices"][0]["message"]
    assert json.loads(message["content"]) == {"x": "y"}
    assert "tool_calls" not in message
    assert json.loads(result.body)["choices"][0]["finish_reason"] == "stop"


def test_unary_malformed_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        AnthropicAdapter(provider()).unary_result(make_call(), b"<html>")


# --- errors and the request ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (529, "overloaded_error", True),
        (500, "api_error", True),
        (429, "rate_limit_error", True),
        (400, "invalid_request_error", False),
        (404, "not_found_error", False),
        (401, "authentication_error", True),
    ],
)
def test_error_mapping(status: int, kind: str, retryable: bool) -> None:
    body = json.dumps(
        {"type": "error", "error": {"type": kind, "message": "msg"}, "request_id": "req_1"}
    ).encode()
    err = AnthropicAdapter(provider()).error_from_response(status, body, {})
    assert isinstance(err, UpstreamStatusError)
    assert err.retryable is retryable
    assert err.upstream_status == status
    assert err.code == kind
    if not retryable:
        assert err.type == kind
        assert err.message == "msg"


def test_error_mapping_of_a_non_json_body() -> None:
    err = AnthropicAdapter(provider()).error_from_response(502, b"Bad Gateway", {})
    assert err.retryable
    assert err.message == "Bad Gateway"


def test_build_request_url_and_headers() -> None:
    adapter = make_adapter(provider())
    request = adapter.build_request(make_call())
    assert request.url == "https://api.anthropic.com/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["content-type"] == "application/json"
    body = json.loads(request.body)
    assert body["stream"] is True
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 64000  # the model's own output limit
    custom = AnthropicAdapter(provider("http://127.0.0.1:9/"))
    unary = custom.build_request(make_call(stream=False))
    assert unary.url == "http://127.0.0.1:9/v1/messages"
    assert "stream" not in json.loads(unary.body)
