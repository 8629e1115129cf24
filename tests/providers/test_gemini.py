"""Gemini adapter: the request (URL, headers), the stream translator on recorded streams,
the split-anywhere property, the non-streaming answer and error mapping."""

from __future__ import annotations

import itertools
import json
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
from gateway.providers.base import Translated
from gateway.providers.base import UpstreamCall
from gateway.providers.gemini.adapter import GeminiAdapter
from gateway.providers.gemini.adapter import GeminiStreamTranslator
from gateway.providers.gemini.adapter import finish_reason
from gateway.providers.registry import make_adapter
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from tests.fixtures import FIXTURES
from tests.providers.stream_view import client_chunks

SECRET = "gk-test-0123456789"
BODY: dict[str, Any] = {"model": "g", "messages": [{"role": "user", "content": "hi"}]}


def provider(base_url: str | None = None) -> ProviderConfig:
    return provider_config(
        name="gem", kind="gemini", base_url=base_url, keys=[ProviderKey(key=Secret(SECRET))]
    )


def make_call(*, stream: bool = True, model: str = "gemini-2.5-flash") -> UpstreamCall:
    config = provider()
    return UpstreamCall(
        request=msgspec.convert(BODY, ChatRequest),
        body=BODY,
        provider=config,
        key=config.keys[0],
        model=model,
        stream=stream,
        request_id="req1",
        created=1700000000,
    )


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def translate(data: bytes, cuts: list[int] | None = None) -> tuple[list[Translated], bool]:
    """Bytes through SSEDecoder and the translator, cut at `cuts`; (items, done), the items
    as the client sees them (`client_chunks`: tool calls numbered per stream)."""
    translator = GeminiStreamTranslator(make_call())
    decoder = SSEDecoder()
    bounds = [0, *(cuts or []), len(data)]
    items: list[Translated] = []
    for start, end in itertools.pairwise(bounds):
        for frame in decoder.feed(data[start:end]):
            items += translator.feed(frame)
    for frame in decoder.close():
        items += translator.feed(frame)
    items += translator.close()
    sent = client_chunks([item.chunk for item in items], id_seed="req1")
    return [Translated(chunk) for chunk in sent], translator.done


def accumulate(items: list[Translated]) -> StreamAccumulator:
    acc = StreamAccumulator(id_seed="req1")
    for item in items:
        acc.add(item.chunk)
    return acc


def chunks(items: list[Translated]) -> list[dict[str, Any]]:
    return [json.loads(msgspec.json.encode(i.chunk)) for i in items]


def tool_deltas(items: list[Translated]) -> list[dict[str, Any]]:
    return [
        tc for c in chunks(items) for ch in c["choices"] for tc in ch["delta"].get("tool_calls", [])
    ]


def finishes(items: list[Translated]) -> list[str]:
    return [
        ch["finish_reason"] for c in chunks(items) for ch in c["choices"] if ch["finish_reason"]
    ]


# --- request -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "prefix"),
    [
        (None, "https://generativelanguage.googleapis.com/v1beta/models/"),
        ("http://127.0.0.1:9/", "http://127.0.0.1:9/v1beta/models/"),
    ],
)
def test_urls_for_stream_and_unary(base_url: str | None, prefix: str) -> None:
    adapter = GeminiAdapter(provider(base_url))
    streamed = adapter.build_request(make_call(stream=True))
    unary = adapter.build_request(make_call(stream=False))
    assert streamed.url == prefix + "gemini-2.5-flash:streamGenerateContent?alt=sse"
    assert unary.url == prefix + "gemini-2.5-flash:generateContent"


def test_key_goes_in_x_goog_api_key_only() -> None:
    request = GeminiAdapter(provider()).build_request(make_call())
    assert request.headers["x-goog-api-key"] == SECRET
    assert request.headers["Content-Type"] == "application/json"
    assert "Authorization" not in request.headers
    assert SECRET.encode() not in request.body
    assert SECRET not in request.url


def test_models_prefix_in_the_model_id_is_not_doubled() -> None:
    request = GeminiAdapter(provider()).build_request(make_call(model="models/gemini-2.0-flash"))
    assert request.url.endswith("/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse")


def test_registry_knows_the_gemini_kind() -> None:
    assert isinstance(make_adapter(provider()), GeminiAdapter)


# --- stream: recorded fixtures -------------------------------------------------------------


def test_parallel_calls_get_indexes_0_1_2_and_distinct_ids() -> None:
    items, done = translate(fixture("gemini_parallel_function_calls.sse"))
    assert done
    deltas = tool_deltas(items)
    assert [d["index"] for d in deltas] == [0, 1, 2]
    assert len({d["id"] for d in deltas}) == 3
    assert all(d["type"] == "function" for d in deltas)
    assert [d["function"] for d in deltas] == [{"name": "generate_topic", "arguments": "{}"}] * 3
    assert finishes(items) == ["tool_calls"]
    usage = items[-1].chunk.usage
    assert items[-1].chunk.choices == []
    assert usage is not UNSET
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (83, 220, 303)
    assert usage.completion_tokens_details.reasoning_tokens == 190  # type: ignore[union-attr]


def test_call_with_thought_signature_and_empty_final_text() -> None:
    items, done = translate(fixture("gemini_function_calls.sse"))
    assert done
    first = chunks(items)[0]["choices"][0]["delta"]
    assert first["role"] == "assistant"
    deltas = tool_deltas(items)
    assert len(deltas) == 1
    assert deltas[0]["function"] == {"name": "get_country", "arguments": "{}"}
    assert finishes(items) == ["tool_calls"]
    # the empty text part of the last event produces no content delta
    assert not [c for c in chunks(items) for ch in c["choices"] if ch["delta"].get("content")]
    usage = items[-1].chunk.usage
    assert usage is not UNSET
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (29, 212, 241)


def test_call_and_finish_in_the_same_event() -> None:
    items, done = translate(fixture("gemini_2_0_flash_function_call.sse"))
    assert done
    deltas = tool_deltas(items)
    assert deltas == [
        {
            "index": 0,
            "id": "call_req1_0",
            "type": "function",
            "function": {"name": "get_capital", "arguments": '{"country":"France"}'},
        }
    ]
    assert finishes(items) == ["tool_calls"]
    assert items[0].chunk.model == "gemini-2.0-flash"


def test_text_stream_keeps_the_last_usage_not_a_sum() -> None:
    items, done = translate(fixture("gemini_2_0_flash_text_after_tool.sse"))
    assert done
    acc = accumulate(items)
    assert acc.message().content == "The temperature in Paris is 30°C.\n"
    assert finishes(items) == ["stop"]
    assert acc.usage is not None
    assert (acc.usage.prompt_tokens, acc.usage.completion_tokens) == (79, 12)
    assert acc.usage.total_tokens == 91


ALL_FIXTURES = [
    "gemini_function_calls.sse",
    "gemini_2_0_flash_function_call.sse",
    "gemini_2_0_flash_text_after_tool.sse",
    "gemini_parallel_function_calls.sse",
]


@pytest.mark.parametrize("name", ALL_FIXTURES)
def test_every_chunk_has_one_choice_or_is_the_usage_chunk(name: str) -> None:
    items, _ = translate(fixture(name))
    assert len(finishes(items)) == 1
    for c in chunks(items)[:-1]:
        assert len(c["choices"]) == 1
        assert c["choices"][0]["index"] == 0
    assert chunks(items)[-1]["choices"] == []
    assert len({c["id"] for c in chunks(items)}) == 1


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_split_anywhere_same_result(data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(ALL_FIXTURES))
    raw = fixture(name)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(raw)), max_size=12)))
    whole, _ = translate(raw)
    split, done = translate(raw, cuts)
    assert done
    assert chunks(split) == chunks(whole)
    a, b = accumulate(whole), accumulate(split)
    created = {"id": "x", "model": "m", "created": 0}
    assert a.completion(**created) == b.completion(**created)  # type: ignore[arg-type]


# --- stream: constructed events --------------------------------------------------------------


def event(obj: dict[str, Any]) -> SSEEvent:
    return SSEEvent(data=json.dumps(obj).encode())


def candidate(parts: list[dict[str, Any]], finish: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if finish:
        c["finishReason"] = finish
    return {"candidates": [c]}


def test_calls_across_events_keep_counting_and_thoughts_are_reasoning() -> None:
    t = GeminiStreamTranslator(make_call())
    items = t.feed(event(candidate([{"text": "hmm", "thought": True}, {"text": "Hi"}])))
    items += t.feed(event(candidate([{"functionCall": {"name": "a", "args": {"x": 1}}}])))
    items += t.feed(event(candidate([{"functionCall": {}}])))  # Vertex terminator: no call
    items += t.feed(event(candidate([{"functionCall": {"name": "b"}}], "STOP")))
    items += t.close()
    acc = accumulate(items)
    message = acc.message()
    assert message.reasoning_content == "hmm"
    assert message.content == "Hi"
    calls = message.tool_calls
    assert calls is not UNSET
    assert [(c.id, c.function.name, c.function.arguments) for c in calls] == [
        ("call_req1_0", "a", '{"x":1}'),
        ("call_req1_1", "b", "{}"),
    ]
    assert finishes(items) == ["tool_calls"]
    assert t.done


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("STOP", "stop"),
        ("MAX_TOKENS", "length"),
        ("SAFETY", "content_filter"),
        ("RECITATION", "content_filter"),
        ("BLOCKLIST", "content_filter"),
        ("PROHIBITED_CONTENT", "content_filter"),
        ("SPII", "content_filter"),
        ("IMAGE_SAFETY", "content_filter"),
        ("MALFORMED_FUNCTION_CALL", "stop"),
        ("OTHER", "stop"),
    ],
)
def test_finish_reasons(reason: str, expected: str) -> None:
    assert finish_reason(reason, made_calls=False) == expected
    assert finish_reason(reason, made_calls=True) == "tool_calls"


def test_no_finish_reason_leaves_the_stream_unfinished() -> None:
    t = GeminiStreamTranslator(make_call())
    t.feed(event({**candidate([{"text": "Hel"}]), "usageMetadata": {"promptTokenCount": 3}}))
    tail = t.close()
    assert not t.done
    assert [i.chunk.choices for i in tail] == [[]]  # only the usage chunk


def test_blocked_prompt_finishes_with_content_filter() -> None:
    t = GeminiStreamTranslator(make_call())
    items = t.feed(event({"promptFeedback": {"blockReason": "SAFETY"}}))
    items += t.close()
    assert t.done
    assert finishes(items) == ["content_filter"]


def test_error_event_raises_stream_error() -> None:
    t = GeminiStreamTranslator(make_call())
    t.feed(event(candidate([{"text": "Hi"}])))
    err = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    with pytest.raises(UpstreamStreamError) as info:
        t.feed(event(err))
    assert info.value.message == "The model is overloaded."
    assert info.value.code == "UNAVAILABLE"
    assert info.value.retryable


def test_malformed_event_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        GeminiStreamTranslator(make_call()).feed(SSEEvent(data=b"{not json"))


def test_blank_event_is_skipped() -> None:
    assert GeminiStreamTranslator(make_call()).feed(SSEEvent(data=b"  ")) == []


# --- non-streaming ---------------------------------------------------------------------------


def test_unary_answer_becomes_a_chat_completion() -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "think", "thought": True},
                        {"text": "Calling."},
                        {"functionCall": {"name": "a", "args": {"q": "x"}}},
                        {"functionCall": {"name": "b", "args": {}}},
                    ],
                },
                "finishReason": "STOP",
            }
        ],
        "usageMetadata": {
            "promptTokenCount": 10,
            "candidatesTokenCount": 5,
            "thoughtsTokenCount": 4,
            "cachedContentTokenCount": 2,
            "totalTokenCount": 19,
        },
        "modelVersion": "gemini-2.5-flash",
        "responseId": "r1",
    }
    result = GeminiAdapter(provider()).unary_result(
        make_call(stream=False), json.dumps(body).encode()
    )
    out = json.loads(result.body)
    assert out["object"] == "chat.completion"
    assert out["model"] == result.model == "gemini-2.5-flash"
    choice = out["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] == "Calling."
    assert choice["message"]["reasoning_content"] == "think"
    assert [(c["id"], c["function"]) for c in choice["message"]["tool_calls"]] == [
        ("call_req1_0", {"name": "a", "arguments": '{"q":"x"}'}),
        ("call_req1_1", {"name": "b", "arguments": "{}"}),
    ]
    assert out["usage"] == {
        "prompt_tokens": 10,
        "completion_tokens": 9,
        "total_tokens": 19,
        "prompt_tokens_details": {"cached_tokens": 2},
        "completion_tokens_details": {"reasoning_tokens": 4},
    }
    assert result.usage is not None
    assert result.usage.total_tokens == 19


def test_unary_text_answer() -> None:
    body = candidate([{"text": "Hello"}], "MAX_TOKENS")
    result = GeminiAdapter(provider()).unary_result(
        make_call(stream=False), json.dumps(body).encode()
    )
    out = json.loads(result.body)
    assert out["choices"][0]["message"] == {"role": "assistant", "content": "Hello"}
    assert out["choices"][0]["finish_reason"] == "length"
    assert result.usage is None
    assert result.model == "gemini-2.5-flash"


def test_unary_malformed_body_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        GeminiAdapter(provider()).unary_result(make_call(stream=False), b"<html>")


# --- errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "google_status", "retryable"),
    [
        (400, "INVALID_ARGUMENT", False),
        (404, "NOT_FOUND", False),
        (429, "RESOURCE_EXHAUSTED", True),
        (500, "INTERNAL", True),
        (503, "UNAVAILABLE", True),
    ],
)
def test_google_error_bodies(status: int, google_status: str, retryable: bool) -> None:
    body = {"error": {"code": status, "message": f"m{status}", "status": google_status}}
    err = GeminiAdapter(provider()).error_from_response(status, json.dumps(body).encode(), {})
    assert isinstance(err, UpstreamStatusError)
    assert err.upstream_status == status
    assert err.retryable is retryable
    assert err.message == f"m{status}"
    assert err.code == google_status
    if not retryable:
        assert err.type == google_status


def test_key_errors_never_quote_the_upstream() -> None:
    body = b'{"error": {"code": 400, "message": "API key not valid", "status": "INVALID_ARGUMENT"}}'
    err = GeminiAdapter(provider()).error_from_response(403, body, {})
    assert "API key" not in err.message
    assert err.retryable


def test_non_json_error_body_keeps_an_excerpt() -> None:
    err = GeminiAdapter(provider()).error_from_response(502, b"Bad Gateway", {})
    assert err.message == "Bad Gateway"
    assert err.retryable


def test_chunk_type_is_canonical() -> None:
    items, _ = translate(fixture("gemini_2_0_flash_text_after_tool.sse"))
    assert all(isinstance(i.chunk, ChatChunk) and i.raw is None for i in items)
