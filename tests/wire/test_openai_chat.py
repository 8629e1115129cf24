"""OpenAI chat wire types: "" / null / absent survive a round trip, upstream chunks are lenient."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.framing.sse import SSEDecoder
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import ToolCallDelta
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_chat import chunk_decoder
from gateway.wire.openai_chat import encoder
from tests.fixtures import FIXTURES

RECORDED = ["openai_chat_parallel_tools.sse", "openai_chat_parallel_tools_sdk_fixture.sse"]


def round_trip(raw: bytes, tp: type[Any]) -> bytes:
    return encoder.encode(msgspec.json.decode(raw, type=tp))


# --- "", null and absent ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        b"{}",
        b'{"content":""}',
        b'{"content":null}',
        b'{"role":"assistant"}',
        b'{"role":"assistant","content":""}',
        b'{"role":"assistant","content":null}',
        b'{"role":null}',
        b'{"refusal":""}',
        b'{"refusal":null}',
        b'{"reasoning_content":""}',
        b'{"reasoning_content":null}',
        b'{"tool_calls":null}',
        b'{"tool_calls":[]}',
        b'{"content":"","refusal":null,"tool_calls":[]}',
    ],
)
def test_delta_round_trips_exactly(raw: bytes) -> None:
    assert round_trip(raw, Delta) == raw


def test_delta_content_empty_null_and_absent_are_three_values() -> None:
    empty = msgspec.json.decode(b'{"content":""}', type=Delta)
    null = msgspec.json.decode(b'{"content":null}', type=Delta)
    absent = msgspec.json.decode(b"{}", type=Delta)
    assert (empty.content, null.content, absent.content) == ("", None, UNSET)


@pytest.mark.parametrize(
    "raw",
    [
        b'{"index":0}',
        b'{"index":0,"id":null}',
        b'{"index":0,"id":"call_1","type":"function","function":{"name":"f","arguments":""}}',
        b'{"index":1,"function":{"arguments":""}}',
        b'{"index":1,"function":{"arguments":"{\\"a\\""}}',
        b'{"index":1,"function":{}}',
        b'{"id":"call_1","type":null}',
    ],
)
def test_tool_call_delta_round_trips_exactly(raw: bytes) -> None:
    assert round_trip(raw, ToolCallDelta) == raw


@pytest.mark.parametrize(
    "raw",
    [
        b'{"index":0,"delta":{}}',
        b'{"index":0,"delta":{},"finish_reason":null}',
        b'{"index":0,"delta":{"content":""},"finish_reason":"stop"}',
        b'{"index":0,"delta":{"content":null},"logprobs":null,"finish_reason":null}',
    ],
)
def test_chunk_choice_round_trips_exactly(raw: bytes) -> None:
    assert round_trip(raw, ChunkChoice) == raw


LOGPROBS_CHOICE = (
    b'{"index":0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.1,'
    b'"bytes":[97],"top_logprobs":[]}],"refusal":null},"finish_reason":null}'
)


def test_chunk_choice_with_a_logprobs_object_round_trips() -> None:
    assert round_trip(LOGPROBS_CHOICE, ChunkChoice) == LOGPROBS_CHOICE


HEAD = b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":['


@pytest.mark.parametrize(
    "raw",
    [
        HEAD + b'{"index":0,"delta":{"content":""}}]}',
        HEAD + b'{"index":0,"delta":{"content":null}}]}',
        HEAD + b'{"index":0,"delta":{}}]}',
        HEAD + b'{"index":0,"delta":{}}],"usage":null}',
        HEAD + b'{"index":0,"delta":{}}],"system_fingerprint":null,"service_tier":"default"}',
        HEAD + b'],"usage":{"prompt_tokens":3,"completion_tokens":2,"total_tokens":5}}',
    ],
)
def test_chat_chunk_round_trips_exactly(raw: bytes) -> None:
    assert encoder.encode(chunk_decoder.decode(raw)) == raw


def test_built_chunk_carries_only_the_fields_set() -> None:
    chunk = ChatChunk(id="c", model="m", choices=[ChunkChoice(delta=Delta(content=""))])
    encoded = json.loads(encoder.encode(chunk))
    assert set(encoded) == {"id", "object", "created", "model", "choices"}
    assert encoded["choices"] == [{"index": 0, "delta": {"content": ""}}]


# --- lenient upstream chunks ------------------------------------------------------------------


def test_unknown_fields_anywhere_in_a_chunk_are_ignored() -> None:
    raw = json.dumps(
        {
            "id": "c1",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": "m",
            "obfuscation": "3Y6yaTIPlXV",
            "x_groq": {"id": "req_1"},
            "prompt_filter_results": [{"prompt_index": 0}],
            "choices": [
                {
                    "index": 0,
                    "content_filter_results": {"hate": {"filtered": False}},
                    "delta": {
                        "content": "hi",
                        "annotations": [],
                        "audio": {"id": "a1"},
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "extra": True,
                                "function": {"name": "f", "arguments": "", "x": 1},
                            }
                        ],
                    },
                    "stop_reason": None,
                    "matched_stop": 2,
                    "finish_reason": None,
                }
            ],
            "usage": {
                "prompt_tokens": 3,
                "completion_tokens": 2,
                "total_tokens": 5,
                "prompt_tokens_details": {"cached_tokens": 1, "new_kind_tokens": 9},
                "cost": 0.001,
            },
        }
    ).encode()
    chunk = chunk_decoder.decode(raw)
    (choice,) = chunk.choices
    assert choice.delta.content == "hi"
    assert choice.delta.tool_calls not in (UNSET, None)
    (call,) = choice.delta.tool_calls  # type: ignore[misc]
    assert (call.index, call.id, call.function.name) == (0, "call_1", "f")  # type: ignore[union-attr]
    assert isinstance(chunk.usage, Usage)
    assert chunk.usage.total_tokens == 5
    assert chunk.error is UNSET


def test_error_event_decodes_with_error_set() -> None:
    raw = (
        b'{"error":{"message":"The server had an error while processing your request.",'
        b'"type":"server_error","param":null,"code":"server_error"}}'
    )
    chunk = chunk_decoder.decode(raw)
    assert chunk.error is not UNSET
    assert chunk.error.message.startswith("The server had an error")
    assert (chunk.error.type, chunk.error.param, chunk.error.code) == (
        "server_error",
        None,
        "server_error",
    )
    assert chunk.choices == []


@pytest.mark.parametrize(
    ("detail", "code"),
    [({"message": "x", "code": 500}, 500), ({"message": "x"}, None), ({}, None)],
)
def test_error_event_is_lenient_about_its_fields(detail: dict[str, Any], code: Any) -> None:
    chunk = chunk_decoder.decode(json.dumps({"error": detail}).encode())
    assert chunk.error is not UNSET
    assert chunk.error.code == code


def test_usage_only_chunk_decodes() -> None:
    raw = (
        b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],'
        b'"usage":{"prompt_tokens":364,"completion_tokens":40,"total_tokens":404,'
        b'"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},'
        b'"completion_tokens_details":{"reasoning_tokens":7,"audio_tokens":0,'
        b'"accepted_prediction_tokens":0,"rejected_prediction_tokens":0}}}'
    )
    chunk = chunk_decoder.decode(raw)
    assert chunk.choices == []
    assert isinstance(chunk.usage, Usage)
    assert (chunk.usage.prompt_tokens, chunk.usage.completion_tokens) == (364, 40)
    details = chunk.usage.completion_tokens_details
    assert details not in (UNSET, None)
    assert details.reasoning_tokens == 7  # type: ignore[union-attr]
    assert encoder.encode(chunk) == raw


# --- recorded streams -------------------------------------------------------------------------


def recorded_events(name: str) -> list[bytes]:
    decoder = SSEDecoder()
    events = decoder.feed((FIXTURES / name).read_bytes()) + decoder.close()
    return [e.data for e in events]


KNOWN_TOP = {f.encode_name for f in msgspec.structs.fields(ChatChunk)}


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_stream_decodes_chunk_by_chunk(name: str) -> None:
    events = recorded_events(name)
    assert events[-1] == b"[DONE]"
    chunks = [chunk_decoder.decode(data) for data in events[:-1]]
    assert len({c.id for c in chunks}) == 1
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert all(c.error is UNSET for c in chunks)
    # The stream ends with one usage-only chunk; every other chunk has exactly one choice.
    *body, usage = chunks
    assert usage.choices == []
    assert isinstance(usage.usage, Usage)
    assert usage.usage.total_tokens == usage.usage.prompt_tokens + usage.usage.completion_tokens
    assert all(len(c.choices) == 1 for c in body)
    assert body[0].choices[0].delta.role == "assistant"
    assert body[0].choices[0].delta.content is None  # null, not "" and not absent
    assert body[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_chunks_re_encode_to_their_known_fields(name: str) -> None:
    for data in recorded_events(name)[:-1]:
        source = json.loads(data)
        known = {k: v for k, v in source.items() if k in KNOWN_TOP}
        assert json.loads(encoder.encode(chunk_decoder.decode(data))) == known


@pytest.mark.parametrize("name", RECORDED)
def test_recorded_tool_call_deltas_keep_their_identity(name: str) -> None:
    starts: list[tuple[int, str, str]] = []
    fragments: dict[int, list[str]] = {}
    for data in recorded_events(name)[:-1]:
        for choice in chunk_decoder.decode(data).choices:
            for tc in choice.delta.tool_calls or []:
                assert isinstance(tc.index, int)
                assert tc.function is not UNSET
                if tc.id is not UNSET:
                    assert isinstance(tc.id, str)
                    assert isinstance(tc.function.name, str)
                    starts.append((tc.index, tc.id, tc.function.name))
                else:
                    assert tc.function.name is UNSET  # later deltas: index and arguments only
                if isinstance(tc.function.arguments, str):
                    fragments.setdefault(tc.index, []).append(tc.function.arguments)
    assert [index for index, _, _ in starts] == list(range(len(starts)))
    assert len(starts) >= 2
    for index in range(len(starts)):
        assert isinstance(json.loads("".join(fragments[index])), dict)
