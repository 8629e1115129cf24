"""Canonical chunks -> Responses streaming events: order, sequence numbers, identities."""

from __future__ import annotations

import pytest

from gateway.errors import UpstreamStreamError
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import FunctionDelta
from gateway.wire.openai_chat import ToolCallDelta
from tests.inbound.responses_chunks import call
from tests.inbound.responses_chunks import chunk
from tests.inbound.responses_chunks import decode
from tests.inbound.responses_chunks import outbound
from tests.inbound.responses_chunks import run
from tests.inbound.responses_chunks import types


def test_text_event_order_and_completed_response() -> None:
    events = run(
        outbound(),
        [
            chunk(role="assistant", content=""),
            chunk(content="Hel"),
            chunk(content="lo"),
            chunk(finish="stop"),
        ],
    )
    assert types(events) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    created = events[0][1]["response"]
    assert created["id"] == "resp_abc"
    assert created["status"] == "in_progress"
    assert created["model"] == "smart"
    assert created["output"] == []
    added = events[2][1]
    assert added["item"] == {
        "type": "message",
        "id": added["item"]["id"],
        "status": "in_progress",
        "content": [],
        "role": "assistant",
    }
    item_id = added["item"]["id"]
    assert item_id.startswith("msg_")
    assert events[3][1]["part"] == {
        "type": "output_text",
        "text": "",
        "annotations": [],
        "logprobs": [],
    }
    assert [e["delta"] for _, e in events[4:6]] == ["Hel", "lo"]
    assert all(e["item_id"] == item_id and e["output_index"] == 0 for _, e in events[3:8])
    assert events[6][1]["text"] == "Hello"
    final = events[-1][1]["response"]
    assert final["status"] == "completed"
    assert final["completed_at"] == 1800
    assert final["output"] == [events[8][1]["item"]]
    assert final["output"][0]["content"][0]["text"] == "Hello"
    assert final["usage"] == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 4},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 3},
        "total_tokens": 29,
    }


def test_reasoning_then_text_then_call() -> None:
    events = run(
        outbound(),
        [
            chunk(role="assistant", reasoning="Let me "),
            chunk(reasoning="think."),
            chunk(content="Checking."),
            chunk(calls=[call(0, "", id="call_w", name="get_weather")]),
            chunk(calls=[call(0, '{"city":')]),
            chunk(calls=[call(0, '"Paris"}')]),
            chunk(finish="tool_calls"),
        ],
    )
    assert types(events) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "reasoning_text.delta",
        "reasoning_text.delta",
        "reasoning_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "function_call_arguments.done",
        "output_item.done",
        "completed",
    ]
    output = events[-1][1]["response"]["output"]
    assert [i["type"] for i in output] == ["reasoning", "message", "function_call"]
    assert output[0]["content"] == [{"type": "reasoning_text", "text": "Let me think."}]
    assert output[0]["summary"] == []
    assert events[4][1]["delta"] == "Let me "
    assert "logprobs" not in events[4][1]
    fc_added = events[15][1]
    assert fc_added["output_index"] == 2
    assert fc_added["item"] == {
        "type": "function_call",
        "id": fc_added["item"]["id"],
        "status": "in_progress",
        "arguments": "",
        "call_id": "call_w",
        "name": "get_weather",
    }
    assert fc_added["item"]["id"].startswith("fc_")
    assert events[18][1]["arguments"] == '{"city":"Paris"}'
    assert events[18][1]["name"] == "get_weather"
    assert output[2]["arguments"] == '{"city":"Paris"}'
    assert output[2]["status"] == "completed"


def test_interleaved_calls_get_their_own_deltas() -> None:
    events = run(
        outbound(),
        [
            chunk(role="assistant"),
            chunk(calls=[call(0, "", id="call_a", name="search")]),
            chunk(calls=[call(1, "", id="call_b", name="get_user")]),
            chunk(calls=[call(0, '{"q":')]),
            chunk(calls=[call(1, '{"id":')]),
            chunk(calls=[call(0, '"x"}')]),
            chunk(calls=[call(1, '"u"}')]),
            chunk(finish="tool_calls"),
        ],
    )
    added = [e["item"] for name, e in events if name == "response.output_item.added"]
    ids = {item["call_id"]: item["id"] for item in added}
    assert len(set(ids.values())) == 2
    args: dict[str, str] = {}
    for name, e in events:
        if name == "response.function_call_arguments.delta":
            args[e["item_id"]] = args.get(e["item_id"], "") + e["delta"]
    assert args == {ids["call_a"]: '{"q":"x"}', ids["call_b"]: '{"id":"u"}'}
    deltas = [e for name, e in events if name == "response.function_call_arguments.delta"]
    assert [d["item_id"] for d in deltas] == [ids["call_a"], ids["call_b"]] * 2
    assert [d["output_index"] for d in deltas] == [0, 1, 0, 1]
    output = events[-1][1]["response"]["output"]
    assert [(i["call_id"], i["name"], i["arguments"]) for i in output] == [
        ("call_a", "search", '{"q":"x"}'),
        ("call_b", "get_user", '{"id":"u"}'),
    ]


def test_call_ids_come_from_the_accumulator_when_upstream_has_none() -> None:
    no_id = ToolCallDelta(index=0, function=FunctionDelta(name="now", arguments="{}"))
    events = run(outbound(), [chunk(calls=[no_id]), chunk(finish="stop")])
    item = events[-1][1]["response"]["output"][0]
    assert item["call_id"] == "call_req1_0"
    assert item["arguments"] == "{}"


@pytest.mark.parametrize(
    ("finish", "reason"), [("length", "max_output_tokens"), ("content_filter", "content_filter")]
)
def test_incomplete(finish: str, reason: str) -> None:
    events = run(outbound(), [chunk(content="cut"), chunk(finish=finish)])
    assert types(events)[-1] == "incomplete"
    response = events[-1][1]["response"]
    assert response["status"] == "incomplete"
    assert response["incomplete_details"] == {"reason": reason}
    assert response["output"][0]["status"] == "incomplete"
    assert events[-2][1]["item"]["status"] == "incomplete"


def test_refusal_part() -> None:
    events = run(
        outbound(), [chunk(refusal="I can't"), chunk(refusal=" help."), chunk(finish="stop")]
    )
    assert types(events)[2:-1] == [
        "output_item.added",
        "content_part.added",
        "refusal.delta",
        "refusal.delta",
        "refusal.done",
        "content_part.done",
        "output_item.done",
    ]
    assert events[6][1]["refusal"] == "I can't help."
    assert events[-1][1]["response"]["output"][0]["content"] == [
        {"type": "refusal", "refusal": "I can't help."}
    ]


def test_empty_answer_is_an_empty_message() -> None:
    events = run(
        outbound(), [chunk(role="assistant", content=""), chunk(finish="stop")], usage=None
    )
    response = events[-1][1]["response"]
    assert response["output"][0]["content"][0]["text"] == ""
    assert response["usage"] is None
    assert "output_text.done" in types(events)


def test_failure_after_commit_is_response_failed() -> None:
    ob = outbound()
    ob.start_attempt(native=False)
    acc = StreamAccumulator()
    data = ob.chunk(acc.add(chunk(content="Hel")) or ChatChunk(), None)
    data += ob.chunk(
        acc.add(chunk(calls=[call(0, '{"a"', id="call_x", name="f")])) or ChatChunk(), None
    )
    data += ob.error(UpstreamStreamError("model crashed"))
    events = decode(data)
    assert [e["sequence_number"] for _, e in events] == list(range(len(events)))
    assert types(events)[-1] == "failed"
    response = events[-1][1]["response"]
    assert response["status"] == "failed"
    assert response["error"] == {"code": "upstream_stream_error", "message": "model crashed"}
    assert [(i["type"], i["status"]) for i in response["output"]] == [
        ("message", "completed"),
        ("function_call", "incomplete"),
    ]
    assert response["output"][1]["arguments"] == '{"a"'
    assert ob.finished is None


def test_failure_before_any_chunk_still_starts_the_response() -> None:
    ob = outbound()
    ob.start_attempt(native=False)
    assert types(decode(ob.error(UpstreamStreamError("boom")))) == [
        "created",
        "in_progress",
        "failed",
    ]


def test_a_new_attempt_starts_over() -> None:
    ob = outbound()
    ob.start_attempt(native=False)
    ob.chunk(chunk(content="lost"), None)
    events = run(ob, [chunk(content="kept"), chunk(finish="stop")])
    assert events[0][1]["sequence_number"] == 0
    assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == "kept"


def test_echoed_settings() -> None:
    tools = [{"type": "function", "name": "f", "parameters": {}, "strict": None}]
    ob = outbound(
        instructions="be brief",
        metadata={"k": "v"},
        tools=tools,
        tool_choice="required",
        temperature=0.3,
        store=False,
        previous_response_id="resp_old",
        max_output_tokens=50,
        parallel_tool_calls=None,
        text={"format": {"type": "json_object"}},
    )
    response = run(ob, [chunk(content="x"), chunk(finish="stop")])[-1][1]["response"]
    assert response["instructions"] == "be brief"
    assert response["metadata"] == {"k": "v"}
    assert response["tools"] == tools
    assert response["tool_choice"] == "required"
    assert response["temperature"] == 0.3
    assert response["store"] is False
    assert response["previous_response_id"] == "resp_old"
    assert response["max_output_tokens"] == 50
    assert response["parallel_tool_calls"] is True
    assert response["text"] == {"format": {"type": "json_object"}}
    assert response["reasoning"] == {"effort": None, "summary": None}


def test_finished_holds_the_output_for_storage() -> None:
    ob = outbound()
    events = run(
        ob,
        [
            chunk(content="x"),
            chunk(calls=[call(0, "{}", id="call_1", name="f")]),
            chunk(finish="stop"),
        ],
    )
    assert ob.finished is not None
    assert ob.finished.id == "resp_abc"
    assert ob.finished.output == events[-1][1]["response"]["output"]
