"""The mock provider: a deterministic stream that decodes like a real upstream's."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.framing.sse import SSEDecoder
from gateway.providers.base import UpstreamCall
from gateway.providers.mock.adapter import REPLY
from gateway.providers.mock.adapter import MockAdapter
from gateway.providers.mock.adapter import render_frames
from gateway.providers.mock.adapter import sample_arguments
from gateway.providers.mock.config import MockOptions
from gateway.providers.openai.adapter import ChatStreamTranslator
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import chunk_decoder

PARAMS: dict[str, dict[str, Any]] = {
    "search_documents": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
    "get_user": {
        "type": "object",
        "properties": {"user_id": {"type": "string"}, "verbose": {"type": "boolean"}},
    },
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
    },
}


def tool(name: str) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": PARAMS[name]}}


def body(*tool_names: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
    if tool_names:
        out["tools"] = [tool(n) for n in tool_names]
    return out | extra


def call(payload: dict[str, Any], request_id: str = "req-1", created: int = 0) -> UpstreamCall:
    return UpstreamCall(
        request=msgspec.convert(payload, ChatRequest),
        body=payload,
        provider=provider_config(name="mock", kind="mock"),
        key=None,
        model="mock",
        stream=True,
        request_id=request_id,
        created=created,
    )


class Played:
    """The frames run through the real pipeline: SSE decoder, translator, accumulator."""

    def __init__(self, frames: list[bytes], pieces: list[bytes] | None = None) -> None:
        decoder = SSEDecoder()
        self.translator = ChatStreamTranslator()
        self.acc = StreamAccumulator()
        self.chunks: list[ChatChunk] = []
        events = []
        for piece in pieces if pieces is not None else frames:
            events += decoder.feed(piece)
        events += decoder.close()
        for event in events:
            for t in self.translator.feed(event):
                self.chunks.append(t.chunk)
                self.acc.add(t.chunk)

    def tool_calls(self) -> list[tuple[str, str, Any]]:
        calls = self.acc.message().tool_calls
        assert calls is not UNSET
        return [(c.id, c.function.name, json.loads(c.function.arguments)) for c in calls]

    def argument_order(self) -> list[int]:
        """Tool-call index of each non-empty argument delta, in stream order."""
        order = []
        for chunk in self.chunks:
            for choice in chunk.choices:
                for tc in choice.delta.tool_calls or []:
                    if tc.function is not UNSET and tc.function.arguments:
                        assert isinstance(tc.index, int)
                        order.append(tc.index)
        return order


OPTIONS = MockOptions()


def test_same_request_id_gives_the_same_frames() -> None:
    for payload in (body(), body("search_documents", "get_user")):
        assert render_frames(call(payload), OPTIONS) == render_frames(call(payload), OPTIONS)


def test_request_id_names_the_completion() -> None:
    a = render_frames(call(body(), "req-a"), OPTIONS)
    b = render_frames(call(body(), "req-b"), OPTIONS)
    assert a != b
    assert [f.replace(b"req-a", b"req-b") for f in a] == b
    assert {c.id for c in Played(a).chunks} == {"chatcmpl-mock-req-a"}


def test_frames_carry_the_request_creation_time_and_model() -> None:
    played = Played(render_frames(call(body(), created=1_754_693_439), OPTIONS))
    assert {(c.created, c.model) for c in played.chunks} == {(1_754_693_439, "mock")}


def test_text_reply_without_tools() -> None:
    played = Played(render_frames(call(body()), OPTIONS))
    message = played.acc.message()
    assert message.content == REPLY
    assert message.tool_calls is UNSET
    assert played.acc.choices[0].finish_reason == "stop"
    assert played.translator.done is True


@pytest.mark.parametrize(
    "payload",
    [
        body("search_documents", "get_user", tool_choice="none"),
        body(tools=None),
        body(tools=[]),
        body(tools=[{"type": "custom", "custom": {"name": "grep"}}]),
    ],
    ids=["tool_choice-none", "tools-null", "tools-empty", "no-function-tools"],
)
def test_text_reply_when_no_tool_may_be_called(payload: dict[str, Any]) -> None:
    played = Played(render_frames(call(payload), OPTIONS))
    assert played.acc.message().content == REPLY
    assert played.acc.message().tool_calls is UNSET


def expected_call(i: int, name: str) -> tuple[str, str, Any]:
    return (f"call_mock_{i}", name, json.loads(sample_arguments(PARAMS[name])))


def test_three_tools_give_two_parallel_calls_of_the_first_two() -> None:
    played = Played(
        render_frames(call(body("search_documents", "get_user", "get_weather")), OPTIONS)
    )
    assert played.tool_calls() == [
        expected_call(0, "search_documents"),
        expected_call(1, "get_user"),
    ]
    assert played.acc.choices[0].finish_reason == "tool_calls"
    assert not played.acc.message().content


@pytest.mark.parametrize("choice", ["auto", "required", None])
def test_one_tool_gives_one_call(choice: str | None) -> None:
    payload = body("get_weather") if choice is None else body("get_weather", tool_choice=choice)
    played = Played(render_frames(call(payload), OPTIONS))
    assert played.tool_calls() == [expected_call(0, "get_weather")]
    assert set(played.argument_order()) == {0}


def test_non_function_tools_are_skipped() -> None:
    payload = body("get_user")
    payload["tools"].insert(0, {"type": "custom", "custom": {"name": "grep"}})
    played = Played(render_frames(call(payload), OPTIONS))
    assert played.tool_calls() == [expected_call(0, "get_user")]


@pytest.mark.parametrize("chunks", [2, 4, 12, 40])
def test_argument_deltas_are_interleaved(chunks: int) -> None:
    # Same-shaped parameters give the same number of pieces for both calls.
    payload = body("get_user", "get_weather")
    played = Played(render_frames(call(payload), MockOptions(chunks=chunks)))
    order = played.argument_order()
    assert len(order) >= 2
    assert order == [0, 1] * (len(order) // 2)
    assert [name for _, name, _ in played.tool_calls()] == ["get_user", "get_weather"]


def test_both_calls_start_before_any_arguments() -> None:
    frames = render_frames(call(body("get_user", "get_weather")), OPTIONS)
    deltas = [
        tc
        for chunk in Played(frames).chunks
        for choice in chunk.choices
        for tc in choice.delta.tool_calls or []
    ]
    assert [(tc.index, tc.id, tc.type) for tc in deltas[:2]] == [
        (0, "call_mock_0", "function"),
        (1, "call_mock_1", "function"),
    ]
    assert all(tc.id is UNSET and tc.function.name is UNSET for tc in deltas[2:])  # type: ignore[union-attr]


@pytest.mark.parametrize("chunks", [1, 3, 12, 50])
def test_chunks_option_sets_the_number_of_content_frames(chunks: int) -> None:
    played = Played(render_frames(call(body()), MockOptions(chunks=chunks)))
    contents = [
        c.choices[0].delta.content
        for c in played.chunks
        if c.choices and isinstance(c.choices[0].delta.content, str)
    ]
    assert contents[0] == ""  # the role chunk: content "" as OpenAI-compatible servers send
    assert len(contents[1:]) == chunks
    assert all(contents[1:])
    assert "".join(contents) == REPLY


def test_chunks_option_past_the_reply_length_gives_one_character_each() -> None:
    played = Played(render_frames(call(body()), MockOptions(chunks=len(REPLY) + 50)))
    assert played.acc.message().content == REPLY
    assert len([c for c in played.chunks if c.choices and c.choices[0].delta.content]) == len(REPLY)


@pytest.mark.parametrize("payload", [body(), body("get_user", "get_weather")])
def test_usage_chunk_comes_last_before_done(payload: dict[str, Any]) -> None:
    frames = render_frames(call(payload), OPTIONS)
    assert frames[-1] == b"data: [DONE]\n\n"
    assert frames[-2].startswith(b"data: ")
    assert frames[-2].endswith(b"\n\n")
    usage_chunk = chunk_decoder.decode(frames[-2][6:-2])
    assert usage_chunk.choices == []
    usage = usage_chunk.usage
    assert isinstance(usage, Usage)
    assert usage.prompt_tokens > 0
    assert usage.completion_tokens > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    played = Played(frames)
    assert played.acc.usage == usage
    assert all(c.usage is UNSET for c in played.chunks[:-1])


def test_every_frame_is_one_sse_event() -> None:
    frames = render_frames(call(body("get_user", "get_weather")), OPTIONS)
    for frame in frames:
        decoder = SSEDecoder()
        assert len(decoder.feed(frame)) == 1
        assert decoder.close() == []


@pytest.mark.parametrize("payload", [body(), body("get_user", "get_weather")])
def test_frames_cut_byte_by_byte_give_the_same_answer(payload: dict[str, Any]) -> None:
    frames = render_frames(call(payload), MockOptions(chunks=5))
    whole = b"".join(frames)
    one_by_one = Played(frames, pieces=[whole[i : i + 1] for i in range(len(whole))])
    assert one_by_one.acc.message() == Played(frames).acc.message()


# --- the adapter ------------------------------------------------------------------------------


def test_adapter_plays_the_rendered_frames_with_its_options() -> None:
    options = MockOptions(chunks=5, delay_s=0.25)
    adapter = MockAdapter(provider_config(name="mock", kind="mock", mock=options))
    c = call(body("get_user"))
    request = adapter.build_request(c)
    assert request.playback == render_frames(c, options)
    assert request.playback_delay_s == 0.25
    assert request.url.startswith("mock://")
    assert (adapter.framing, adapter.native_unary) == ("sse", False)


def test_adapter_defaults_without_options() -> None:
    adapter = MockAdapter(provider_config(name="mock", kind="mock"))
    c = call(body())
    request = adapter.build_request(c)
    assert request.playback == render_frames(c, MockOptions())
    assert request.playback_delay_s == 0.0


def test_adapter_serves_non_streaming_requests_by_streaming() -> None:
    with pytest.raises(NotImplementedError):
        MockAdapter(provider_config(name="mock", kind="mock")).unary_result(call(body()), b"{}")


# --- sample_arguments -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("schema", "value"),
    [
        ({"type": "string"}, "mock"),
        ({"type": "integer"}, 1),
        ({"type": "number"}, 1.5),
        ({"type": "boolean"}, True),
        ({"type": "array", "items": {"type": "string"}}, []),
        ({"type": "object", "properties": {"a": {"type": "string"}}}, {}),
        ({"type": "null"}, None),
        ({"enum": ["celsius", "fahrenheit"]}, "celsius"),
        ({"type": "integer", "enum": [3, 5]}, 3),
        ({"type": "string", "enum": []}, "mock"),  # an empty enum falls back to the type
        ({"type": ["null", "integer"]}, 1),
        ({"type": ["boolean", "null"]}, True),
        ({"type": ["string", "number"]}, "mock"),
        ({"type": "date-time"}, "mock"),  # an unknown type
        ({"description": "no type at all"}, "mock"),
        ({"type": 7}, "mock"),
        ("not a schema", "mock"),
    ],
)
def test_sample_value_per_schema(schema: Any, value: Any) -> None:
    out = json.loads(sample_arguments({"type": "object", "properties": {"x": schema}}))
    assert out == {"x": value}
    assert type(out["x"]) is type(value)


def test_sample_arguments_fill_every_property_in_order() -> None:
    params = {
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "limit": {"type": "integer"},
            "score": {"type": "number"},
            "exact": {"type": "boolean"},
            "tags": {"type": "array"},
            "filters": {"type": "object"},
            "sort": {"enum": ["asc", "desc"]},
        },
    }
    raw = sample_arguments(params)
    assert list(json.loads(raw)) == list(params["properties"])
    assert json.loads(raw) == {
        "query": "mock",
        "limit": 1,
        "score": 1.5,
        "exact": True,
        "tags": [],
        "filters": {},
        "sort": "asc",
    }
    assert sample_arguments(params) == raw  # deterministic


@pytest.mark.parametrize(
    "parameters",
    [{}, {"type": "object"}, {"type": "object", "properties": {}}, {"properties": []}, None, "x"],
)
def test_sample_arguments_without_properties_is_an_empty_object(parameters: Any) -> None:
    assert sample_arguments(parameters) == "{}"


def test_sample_value_for_a_null_only_type_list() -> None:
    params = {"type": "object", "properties": {"x": {"type": ["null"]}}}
    assert json.loads(sample_arguments(params)) == {"x": None}
