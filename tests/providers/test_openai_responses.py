"""The Responses API upstream translator (`api: responses`): recorded streams and the fake's
scenarios through the translator and the accumulator, split anywhere, errors, and the
non-streaming answer converted to `chat.completion` (or kept, for a Responses client)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.providers.openai.responses import ResponsesStreamTranslator
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ToolCallDelta
from tests.fixtures import FIXTURES
from tests.providers.stream_view import client_chunks
from tests.upstreams.openai_responses_upstream import PARALLEL
from tests.upstreams.openai_responses_upstream import REASONING_PIECES
from tests.upstreams.openai_responses_upstream import TEXT
from tests.upstreams.openai_responses_upstream import USAGE
from tests.upstreams.openai_responses_upstream import call_id
from tests.upstreams.openai_responses_upstream import script
from tests.upstreams.openai_responses_upstream import sse
from tests.upstreams.openai_upstream import EXPECTED_ARGS
from tests.upstreams.openai_upstream import TEXT_PIECES

FIXTURE_FILES = [
    "openai_responses_function_calls.sse",
    "openai_responses_reasoning_then_function_call.sse",
]
SCENARIOS = ["text", "parallel-2", "text-then-call", "reasoning-then-call", "incomplete"]


def fixture_bytes(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def scenario_bytes(name: str) -> bytes:
    return b"".join(sse(e) for e in script(name).events)


def decode(data: bytes, cuts: list[int] | None = None) -> list[SSEEvent]:
    decoder = SSEDecoder()
    events: list[SSEEvent] = []
    start = 0
    for cut in sorted(cuts or []):
        events += decoder.feed(data[start:cut])
        start = cut
    return events + decoder.feed(data[start:]) + decoder.close()


def translate(data: bytes, cuts: list[int] | None = None) -> list[ChatChunk]:
    """The chunks the client sees (`client_chunks`: tool calls numbered per stream)."""
    translator = ResponsesStreamTranslator(model="m", created=7)
    chunks = [t.chunk for e in decode(data, cuts) for t in translator.feed(e)]
    chunks += [t.chunk for t in translator.close()]
    assert translator.done
    return client_chunks(chunks)


def accumulate(chunks: list[ChatChunk]) -> StreamAccumulator:
    acc = StreamAccumulator()
    for chunk in chunks:
        assert acc.add(chunk) is not None or chunk.usage is not UNSET or not chunk.choices
    return acc


def tool_deltas(chunks: list[ChatChunk]) -> list[ToolCallDelta]:
    return [
        tc
        for c in chunks
        for ch in c.choices
        if ch.delta.tool_calls
        for tc in ch.delta.tool_calls  # type: ignore[union-attr]
    ]


def finishes(chunks: list[ChatChunk]) -> list[Any]:
    return [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason]


# --- recorded streams ----------------------------------------------------------------------


def test_commentary_then_call_keeps_index_0() -> None:
    chunks = translate(fixture_bytes("openai_responses_function_calls.sse"))
    assert chunks[0].id == "resp_0fabc13af1ee0049006a691dfdab8881a1a75f2db7ff78cb83"
    assert chunks[0].model == "gpt-5.5-2026-04-23"
    assert chunks[0].choices[0].delta.role == "assistant"
    deltas = tool_deltas(chunks)
    assert {d.index for d in deltas} == {0}  # output_index 2 is not the tool-call index
    first = deltas[0]
    assert first.id == "call_LabG58Uhrq9kZvR52BYKjToD"  # the call_id, not the fc_ item id
    assert first.type == "function"
    assert first.function is not UNSET
    assert first.function.name == "get_capital"
    assert all(d.id is UNSET and d.type is UNSET for d in deltas[1:])
    acc = accumulate(chunks)
    message = acc.message()
    assert message.content == "I\u2019ll check the capital lookup tool for \u201cPotatoLand.\u201d"
    assert message.tool_calls is not UNSET
    assert json.loads(message.tool_calls[0].function.arguments) == {"country": "PotatoLand"}
    assert acc.choices[0].finish_reason == "tool_calls"
    assert acc.usage is not None
    assert (acc.usage.prompt_tokens, acc.usage.completion_tokens) == (63, 69)
    assert acc.usage.total_tokens == 132
    details = acc.usage.completion_tokens_details
    assert details is not UNSET
    assert details is not None
    assert details.reasoning_tokens == 26


def test_reasoning_then_call_and_usage() -> None:
    chunks = translate(fixture_bytes("openai_responses_reasoning_then_function_call.sse"))
    deltas = tool_deltas(chunks)
    assert {d.index for d in deltas} == {0}
    assert deltas[0].id == "call_CWXgs68YprAjp6t0371hiPOI"
    acc = accumulate(chunks)
    calls = acc.message().tool_calls
    assert calls is not UNSET
    assert [c.function.name for c in calls] == ["final_result"]
    assert json.loads(calls[0].function.arguments) == {"result": 6666}
    assert acc.usage is not None
    assert (acc.usage.prompt_tokens, acc.usage.completion_tokens) == (53, 469)
    details = acc.usage.completion_tokens_details
    assert details is not UNSET
    assert details is not None
    assert details.reasoning_tokens == 448
    usage_chunks = [c for c in chunks if c.usage is not UNSET]
    assert len(usage_chunks) == 1
    assert chunks[-1] is usage_chunks[0]
    assert usage_chunks[0].choices == []


@pytest.mark.parametrize("name", FIXTURE_FILES)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fixture_split_anywhere_same_chunks(name: str, data: st.DataObject) -> None:
    blob = fixture_bytes(name)
    cuts = data.draw(st.lists(st.integers(0, len(blob)), max_size=30))
    assert translate(blob, cuts) == translate(blob)


@pytest.mark.parametrize("name", SCENARIOS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_scenario_split_anywhere_same_chunks(name: str, data: st.DataObject) -> None:
    blob = scenario_bytes(name)
    cuts = data.draw(st.lists(st.integers(0, len(blob)), max_size=40))
    assert translate(blob, cuts) == translate(blob)


# --- the fake's scenarios --------------------------------------------------------------------


def test_text() -> None:
    chunks = translate(scenario_bytes("text"))
    # response.created and response.in_progress: one role chunk
    assert [ch.delta.role for c in chunks for ch in c.choices if ch.delta.role] == ["assistant"]
    acc = accumulate(chunks)
    assert acc.message().content == TEXT
    assert finishes(chunks) == ["stop"]
    assert acc.usage is not None
    assert acc.usage.total_tokens == USAGE["total_tokens"]
    cached = acc.usage.prompt_tokens_details
    assert cached is not UNSET
    assert cached is not None
    assert cached.cached_tokens == 11


def test_interleaved_parallel_calls_get_distinct_complete_arguments() -> None:
    chunks = translate(scenario_bytes("parallel-2"))
    deltas = tool_deltas(chunks)
    assert [d.index for d in deltas[:4]] == [0, 1, 0, 1]  # they do interleave
    starts = [d for d in deltas if d.id is not UNSET]
    assert [(d.index, d.id) for d in starts] == [
        (0, call_id(PARALLEL[0])),
        (1, call_id(PARALLEL[1])),
    ]
    acc = accumulate(chunks)
    calls = acc.message().tool_calls
    assert calls is not UNSET
    assert [c.function.name for c in calls] == PARALLEL
    assert [json.loads(c.function.arguments) for c in calls] == [EXPECTED_ARGS[n] for n in PARALLEL]
    assert acc.choices[0].finish_reason == "tool_calls"


def test_message_before_call_does_not_shift_its_index() -> None:
    chunks = translate(scenario_bytes("text-then-call"))
    assert {d.index for d in tool_deltas(chunks)} == {0}
    message = accumulate(chunks).message()
    assert message.content == TEXT
    assert message.tool_calls is not UNSET
    assert json.loads(message.tool_calls[0].function.arguments) == EXPECTED_ARGS["get_weather"]


def test_reasoning_summary_is_reasoning_content() -> None:
    chunks = translate(scenario_bytes("reasoning-then-call"))
    message = accumulate(chunks).message()
    assert message.reasoning_content == "".join(REASONING_PIECES)
    assert message.content is None
    assert {d.index for d in tool_deltas(chunks)} == {0}


def test_incomplete_for_max_output_tokens_is_length() -> None:
    chunks = translate(scenario_bytes("incomplete"))
    assert finishes(chunks) == ["length"]
    acc = accumulate(chunks)
    assert acc.message().content == "".join(TEXT_PIECES[:2])
    assert acc.usage is not None


def frame(event: dict[str, Any]) -> SSEEvent:
    return SSEEvent(data=json.dumps(event).encode(), event=event["type"])


def test_incomplete_for_content_filter() -> None:
    translator = ResponsesStreamTranslator(model="m", created=1)
    head = {"id": "r", "model": "x", "status": "incomplete"}
    event = {
        "type": "response.incomplete",
        "response": {**head, "incomplete_details": {"reason": "content_filter"}},
    }
    (out,) = translator.feed(frame(event))
    assert out.chunk.choices[0].finish_reason == "content_filter"
    assert translator.done


def test_refusal_delta_is_refusal() -> None:
    translator = ResponsesStreamTranslator(model="m", created=1)
    event = {"type": "response.refusal.delta", "item_id": "msg", "delta": "No."}
    (out,) = translator.feed(frame(event))
    assert out.chunk.choices[0].delta.refusal == "No."


def test_unknown_event_types_are_skipped() -> None:
    translator = ResponsesStreamTranslator(model="m", created=1)
    # a later event type whose `delta` is not a string: skipped by its type, not an error
    odd = {"type": "response.something_new.delta", "delta": {"x": 1}, "item": 5}
    assert translator.feed(frame(odd)) == []
    progress = {"type": "response.web_search_call.searching", "item_id": "ws", "output_index": 0}
    assert translator.feed(frame(progress)) == []


def test_malformed_known_event_is_a_protocol_error() -> None:
    translator = ResponsesStreamTranslator(model="m", created=1)
    with pytest.raises(UpstreamProtocolError):
        translator.feed(frame({"type": "response.output_text.delta", "delta": 5}))
    with pytest.raises(UpstreamProtocolError):
        translator.feed(SSEEvent(data=b"{not json"))


def test_arguments_for_an_unknown_item_are_a_protocol_error() -> None:
    translator = ResponsesStreamTranslator(model="m", created=1)
    event = {"type": "response.function_call_arguments.delta", "item_id": "fc_x", "delta": "{"}
    with pytest.raises(UpstreamProtocolError):
        translator.feed(frame(event))


# --- errors ----------------------------------------------------------------------------------


def feed_all(translator: ResponsesStreamTranslator, data: bytes, content: list[str]) -> None:
    """Feed every event of `data`, collecting the content deltas (until an error raises)."""
    for event in decode(data):
        for t in translator.feed(event):
            content += [ch.delta.content for ch in t.chunk.choices if ch.delta.content]


def stream_error(data: bytes) -> UpstreamStreamError:
    translator = ResponsesStreamTranslator(model="m", created=1)
    with pytest.raises(UpstreamStreamError) as info:
        feed_all(translator, data, [])
    assert not translator.done
    return info.value


def test_failed_response_is_a_retryable_stream_error() -> None:
    err = stream_error(scenario_bytes("failed"))
    assert err.retryable
    assert err.code == "server_error"
    assert err.message == "The model failed to respond."


def test_error_event_after_text() -> None:
    blob = scenario_bytes("error-after")
    translator = ResponsesStreamTranslator(model="m", created=1)
    content: list[str] = []
    with pytest.raises(UpstreamStreamError) as info:
        feed_all(translator, blob, content)
    assert "".join(content) == "".join(TEXT_PIECES[:3])
    assert info.value.retryable
    assert info.value.code == "server_error"
    assert info.value.message == "The server had an error."


@pytest.mark.parametrize(
    ("code", "retryable"),
    [
        ("server_error", True),
        ("rate_limit_exceeded", True),
        (None, True),
        ("invalid_prompt", False),
        ("image_content_policy_violation", False),
    ],
)
def test_failure_retryable_by_code(code: str | None, retryable: bool) -> None:
    error = {"code": code, "message": "m", "param": "input[0]" if code else None}
    event = {"type": "response.failed", "response": {"id": "r", "status": "failed", "error": error}}
    with pytest.raises(UpstreamStreamError) as info:
        ResponsesStreamTranslator(model="m", created=1).feed(frame(event))
    assert info.value.retryable is retryable
    assert info.value.code == (code or "upstream_stream_error")
    if code:
        assert info.value.param == "input[0]"


def test_error_event_nested_shape() -> None:
    event = {"type": "error", "error": {"code": "invalid_prompt", "message": "bad"}}
    with pytest.raises(UpstreamStreamError) as info:
        ResponsesStreamTranslator(model="m", created=1).feed(frame(event))
    assert not info.value.retryable
    assert info.value.message == "bad"


def call_item(status: str, arguments: str) -> dict[str, Any]:
    return {
        "id": "fc_1",
        "type": "function_call",
        "status": status,
        "arguments": arguments,
        "call_id": "call_1",
        "name": "f",
    }


def arguments_sent(events: list[dict[str, Any]]) -> str:
    translator = ResponsesStreamTranslator(model="m", created=1)
    chunks = [t.chunk for e in events for t in translator.feed(frame(e))]
    calls = accumulate(chunks).message().tool_calls
    assert calls is not UNSET
    assert [c.id for c in calls] == ["call_1"]
    return calls[0].function.arguments


def test_call_sent_whole_at_done_is_not_lost() -> None:
    added = {"type": "response.output_item.added", "item": call_item("in_progress", "")}
    done_args = {"type": "response.function_call_arguments.done", "item_id": "fc_1"}
    done_item = {"type": "response.output_item.done", "item": call_item("completed", '{"a":1}')}
    assert arguments_sent([added, done_item]) == '{"a":1}'
    assert arguments_sent([added, {**done_args, "arguments": '{"a":1}'}, done_item]) == '{"a":1}'


def test_done_events_never_repeat_streamed_arguments() -> None:
    added = {"type": "response.output_item.added", "item": call_item("in_progress", "")}
    delta = {"type": "response.function_call_arguments.delta", "item_id": "fc_1"}
    done_args = {"type": "response.function_call_arguments.done", "item_id": "fc_1"}
    done_item = {"type": "response.output_item.done", "item": call_item("completed", '{"a":1}')}
    events = [added, {**delta, "delta": '{"a"'}, {**delta, "delta": ":1}"}]
    events += [{**done_args, "arguments": '{"a":1}'}, done_item]
    assert arguments_sent(events) == '{"a":1}'
    # arguments that came with the added item are not repeated either
    whole = {"type": "response.output_item.added", "item": call_item("in_progress", "{}")}
    assert arguments_sent([whole, {**done_args, "arguments": "{}"}]) == "{}"


def test_items_of_other_shapes_are_skipped() -> None:
    translator = ResponsesStreamTranslator(model="m", created=1)
    item = {"id": "x_1", "type": "future_item", "content": "a string", "summary": 3}
    for kind in ("response.output_item.added", "response.output_item.done"):
        assert translator.feed(frame({"type": kind, "item": item, "output_index": 0})) == []
