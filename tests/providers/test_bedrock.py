"""Bedrock adapter: the stream translator on the recorded ConverseStream body, split
anywhere; exception frames; request translation; the non-streaming answer; errors; the
upstream request (URL, SigV4 or Bearer)."""

from __future__ import annotations

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
from gateway.errors import BadRequest
from gateway.errors import InternalError
from gateway.errors import UpstreamStatusError
from gateway.errors import UpstreamStreamError
from gateway.framing.aws_eventstream import EventStreamDecoder
from gateway.framing.aws_eventstream import EventStreamMessage
from gateway.providers.base import UpstreamCall
from gateway.providers.bedrock.adapter import BedrockAdapter
from gateway.providers.bedrock.adapter import BedrockStreamTranslator
from gateway.providers.bedrock.config import BedrockKey
from gateway.providers.bedrock.request import build_converse_request
from gateway.providers.registry import make_adapter
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.bedrock import encoder as bedrock_encoder
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from tests.fixtures import FIXTURES
from tests.providers.stream_view import client_chunks
from tests.upstreams.bedrock_upstream import exception_frame
from tests.upstreams.bedrock_upstream import frame
from tests.upstreams.bedrock_upstream import scenario_frames

RECORDED = (FIXTURES / "bedrock_converse_tools.eventstream").read_bytes()
SIGV4_KEY = BedrockKey(
    aws_access_key_id=Secret("AKIDEXAMPLE"), aws_secret_access_key=Secret("secret")
)


def provider(base_url: str | None = None) -> ProviderConfig:
    return provider_config(
        name="br", kind="bedrock", region="us-east-1", base_url=base_url, keys=[SIGV4_KEY]
    )


def make_call(
    body: dict[str, Any] | None = None,
    *,
    stream: bool = True,
    key: ProviderKey | None = SIGV4_KEY,
    model: str = "us.amazon.nova-micro-v1:0",
) -> UpstreamCall:
    body = body or {"model": "br", "messages": [{"role": "user", "content": "hi"}]}
    return UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=provider(),
        key=key,
        model=model,
        stream=stream,
        request_id="req1",
        created=1700000000,
        now=1700000000.0,
    )


def decode(data: bytes, cuts: list[int] | None = None) -> list[EventStreamMessage]:
    decoder = EventStreamDecoder()
    out: list[EventStreamMessage] = []
    start = 0
    for cut in sorted(cuts or []):
        out += decoder.feed(data[start:cut])
        start = cut
    return out + decoder.feed(data[start:]) + decoder.close()


def translate(frames: list[EventStreamMessage]) -> list[ChatChunk]:
    """The chunks the client sees (`client_chunks`: tool calls numbered per stream)."""
    translator = BedrockStreamTranslator(model="m", created=1, id="chatcmpl-x")
    chunks = [t.chunk for f in frames for t in translator.feed(f)]
    chunks += [t.chunk for t in translator.close()]
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


# --- stream translation ----------------------------------------------------------------------


def check_recorded(chunks: list[ChatChunk]) -> None:
    deltas = tool_deltas(chunks)
    assert {d.index for d in deltas} == {0}
    assert deltas[0].id.startswith("tooluse_")
    assert deltas[0].function.name
    acc = accumulate(chunks)
    message = acc.message()
    assert isinstance(message.content, str)
    assert message.content.startswith("<thinking")
    assert message.tool_calls is not UNSET
    assert len(message.tool_calls) == 1
    assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris"}
    assert acc.choices[0].finish_reason == "tool_calls"
    assert acc.usage is not None
    assert (acc.usage.prompt_tokens, acc.usage.completion_tokens) == (471, 91)
    assert acc.usage.total_tokens == 562


def test_recorded_stream_text_then_one_tool_index_0() -> None:
    chunks = translate(decode(RECORDED))
    assert chunks[0].choices[0].delta.role == "assistant"
    finish = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finish) == 1
    assert chunks[-1].usage is not UNSET  # usage after the finish, from metadata
    assert not chunks[-1].choices
    check_recorded(chunks)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(RECORDED)), max_size=12))
def test_recorded_stream_split_anywhere(cuts: list[int]) -> None:
    check_recorded(translate(decode(RECORDED, cuts)))


def test_two_tools_get_indexes_0_and_1() -> None:
    chunks = translate(decode(b"".join(scenario_frames("two-tools"))))
    message = accumulate(chunks).message()
    assert message.content == "Let me check that."
    assert message.tool_calls is not UNSET
    assert [json.loads(c.function.arguments) for c in message.tool_calls] == [
        {"city": "Paris", "unit": "celsius"},
        {"timezone": "Europe/Paris"},
    ]
    assert sorted({d.index for d in tool_deltas(chunks)}) == [0, 1]


def test_tool_without_input_gets_empty_object_and_server_tool_skipped() -> None:
    frames = [
        frame("messageStart", {"role": "assistant"}),
        frame(
            "contentBlockStart",
            {
                "contentBlockIndex": 0,
                "start": {"toolUse": {"toolUseId": "s1", "name": "web", "type": "server_tool_use"}},
            },
        ),
        frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"toolUse": {"input": "{}"}}}),
        frame("contentBlockStop", {"contentBlockIndex": 0}),
        frame(
            "contentBlockStart",
            {"contentBlockIndex": 1, "start": {"toolUse": {"toolUseId": "t1", "name": "now"}}},
        ),
        frame("contentBlockStop", {"contentBlockIndex": 1}),
        frame(
            "contentBlockDelta",
            {"contentBlockIndex": 2, "delta": {"reasoningContent": {"text": "hmm"}}},
        ),
        frame("messageStop", {"stopReason": "tool_use"}),
    ]
    chunks = translate(decode(b"".join(frames)))  # no metadata: done at close, no usage
    acc = accumulate(chunks)
    message = acc.message()
    assert message.tool_calls is not UNSET
    assert [(c.id, c.function.arguments) for c in message.tool_calls] == [("t1", "{}")]
    assert message.reasoning_content == "hmm"
    assert acc.usage is None
    assert acc.choices[0].finish_reason == "tool_calls"


@pytest.mark.parametrize(
    ("stop", "finish"),
    [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("max_tokens", "length"),
        ("guardrail_intervened", "content_filter"),
        ("content_filtered", "content_filter"),
        ("tool_use", "stop"),  # no client call was made
    ],
)
def test_finish_reasons(stop: str, finish: str) -> None:
    frames = [
        frame("messageStart", {"role": "assistant"}),
        frame("messageStop", {"stopReason": stop}),
    ]
    chunks = translate(decode(b"".join(frames)))
    assert chunks[-1].choices[0].finish_reason == finish


def test_not_done_before_message_stop() -> None:
    translator = BedrockStreamTranslator(model="m", created=1, id="x")
    for f in decode(b"".join(scenario_frames("text")[:3])):
        translator.feed(f)
    assert translator.close() == []
    assert not translator.done


def test_cache_read_tokens() -> None:
    usage = {"inputTokens": 10, "outputTokens": 5, "totalTokens": 35, "cacheReadInputTokens": 20}
    frames = [frame("messageStop", {"stopReason": "end_turn"}), frame("metadata", {"usage": usage})]
    chunks = translate(decode(b"".join(frames)))
    got = chunks[-1].usage
    assert got is not UNSET
    assert got is not None
    assert (got.prompt_tokens, got.completion_tokens, got.total_tokens) == (30, 5, 35)
    assert got.prompt_tokens_details is not UNSET
    assert got.prompt_tokens_details is not None
    assert got.prompt_tokens_details.cached_tokens == 20


@pytest.mark.parametrize(
    ("kind", "retryable"),
    [
        ("throttlingException", True),
        ("serviceUnavailableException", True),
        ("internalServerException", True),
        ("modelStreamErrorException", True),
        ("validationException", False),
    ],
)
def test_exception_frames(kind: str, retryable: bool) -> None:
    translator = BedrockStreamTranslator(model="m", created=1, id="x")
    (message,) = decode(exception_frame(kind, "boom"))
    with pytest.raises(UpstreamStreamError) as info:
        translator.feed(message)
    assert info.value.code == kind
    assert info.value.retryable is retryable
    assert str(info.value) == "boom"


# --- request translation ---------------------------------------------------------------------


def request_json(body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(
        bedrock_encoder.encode(build_converse_request(make_call(body, **kw)))
    )
    return result


def test_request_translation() -> None:
    body = {
        "model": "br",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "developer", "content": ""},
            {"role": "user", "content": "weather?"},
            {"role": "user", "content": [{"type": "text", "text": ""}]},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "t1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "t1", "content": "sunny"},
            {"role": "tool", "tool_call_id": "t2", "content": ""},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "and this?"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                ],
            },
        ],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                },
            }
        ],
        "tool_choice": "required",
        "max_tokens": 100,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": "END",
        "seed": 3,
        "user": "u",
    }
    assert request_json(body) == {
        "messages": [
            {"role": "user", "content": [{"text": "weather?"}]},
            {
                "role": "assistant",
                "content": [
                    {
                        "toolUse": {
                            "toolUseId": "t1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        }
                    }
                ],
            },
            {
                "role": "user",
                "content": [
                    {"toolResult": {"toolUseId": "t1", "content": [{"text": "sunny"}]}},
                    {"toolResult": {"toolUseId": "t2", "content": []}},
                    {"text": "and this?"},
                    {"image": {"format": "png", "source": {"bytes": "AAAA"}}},
                ],
            },
        ],
        "system": [{"text": "be brief"}],
        "inferenceConfig": {
            "maxTokens": 100,
            "temperature": 0.5,
            "topP": 0.9,
            "stopSequences": ["END"],
        },
        "toolConfig": {
            "tools": [
                {
                    "toolSpec": {
                        "name": "get_weather",
                        "inputSchema": {
                            "json": {"type": "object", "properties": {"city": {"type": "string"}}}
                        },
                        "description": "weather",
                    }
                }
            ],
            "toolChoice": {"any": {}},
        },
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ("auto", {"auto": {}}),
        ({"type": "function", "function": {"name": "f"}}, {"tool": {"name": "f"}}),
        (None, None),
    ],
)
def test_tool_choice(choice: Any, expected: Any) -> None:
    body: dict[str, Any] = {
        "model": "br",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
    }
    if choice is not None:
        body["tool_choice"] = choice
    config = request_json(body)["toolConfig"]
    assert config.get("toolChoice") == expected
    assert config["tools"][0]["toolSpec"]["inputSchema"]["json"] == {
        "type": "object",
        "properties": {},
    }


def test_tool_choice_none_omits_tool_config() -> None:
    body = {
        "model": "br",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [{"type": "function", "function": {"name": "f"}}],
        "tool_choice": "none",
    }
    assert "toolConfig" not in request_json(body)


def test_empty_content_is_dropped_not_nulled() -> None:
    body = {
        "model": "br",
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": ""}],
    }
    assert request_json(body) == {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"audio": {"voice": "x", "format": "wav"}}, "audio"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
    ],
)
def test_rejected_fields(extra: dict[str, Any], param: str) -> None:
    body = {"model": "br", "messages": [{"role": "user", "content": "hi"}], **extra}
    with pytest.raises(BadRequest) as info:
        build_converse_request(make_call(body))
    assert info.value.param == param


def test_http_image_rejected() -> None:
    body = {
        "model": "br",
        "messages": [
            {
                "role": "user",
                "content": [{"type": "image_url", "image_url": {"url": "https://x/a.png"}}],
            }
        ],
    }
    with pytest.raises(BadRequest):
        build_converse_request(make_call(body))


# --- upstream request ------------------------------------------------------------------------


def test_build_request_sigv4_and_url() -> None:
    adapter = make_adapter(provider())
    assert isinstance(adapter, BedrockAdapter)
    assert adapter.framing == "aws-eventstream"
    assert adapter.native_unary
    assert adapter.token_source(provider().keys[0]) is None
    req = adapter.build_request(make_call())
    assert req.url == (
        "https://bedrock-runtime.us-east-1.amazonaws.com/model/us.amazon.nova-micro-v1%3A0"
        "/converse-stream"
    )
    assert req.headers["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/bedrock/aws4_request, SignedHeaders=" in req.headers["authorization"]
    assert "x-amz-date" in req.headers
    assert json.loads(req.body) == {"messages": [{"role": "user", "content": [{"text": "hi"}]}]}
    unary = adapter.build_request(make_call(stream=False))
    assert unary.url.endswith("/model/us.amazon.nova-micro-v1%3A0/converse")


def test_build_request_session_token_and_bearer() -> None:
    adapter = BedrockAdapter(provider("http://127.0.0.1:9/"))
    key = BedrockKey(
        aws_access_key_id=Secret("AK"),
        aws_secret_access_key=Secret("SK"),
        aws_session_token=Secret("TOKEN"),
    )
    req = adapter.build_request(make_call(key=key, model="m"))
    assert req.url == "http://127.0.0.1:9/model/m/converse-stream"
    assert req.headers["x-amz-security-token"] == "TOKEN"
    assert "x-amz-security-token" in req.headers["authorization"]
    bearer = adapter.build_request(make_call(key=ProviderKey(key=Secret("bedrock-api-key"))))
    assert bearer.headers["authorization"] == "Bearer bedrock-api-key"
    assert "x-amz-date" not in bearer.headers


def test_sigv4_signs_at_the_attempt_time_it_is_given() -> None:
    adapter = BedrockAdapter(provider())
    signed = adapter.build_request(make_call()).headers
    assert signed["x-amz-date"] == "20231114T221320Z"  # call.now = 1700000000
    assert "/20231114/us-east-1/bedrock/aws4_request" in signed["authorization"]
    later = msgspec.structs.replace(make_call(), now=1700000000.0 + 86400)
    assert adapter.build_request(later).headers["x-amz-date"] == "20231115T221320Z"


def test_a_call_without_the_attempt_time_is_an_internal_error() -> None:
    adapter = BedrockAdapter(provider())
    with pytest.raises(InternalError, match="attempt's time"):
        adapter.build_request(msgspec.structs.replace(make_call(), now=0.0))
    bearer = msgspec.structs.replace(make_call(key=ProviderKey(key=Secret("k"))), now=0.0)
    with pytest.raises(InternalError):
        adapter.build_request(bearer)  # caught whatever the key: tests must set it


# --- non-streaming and errors ----------------------------------------------------------------


def test_unary_result() -> None:
    answer = {
        "output": {
            "message": {
                "role": "assistant",
                "content": [
                    {"reasoningContent": {"reasoningText": {"text": "think", "signature": "s"}}},
                    {"text": "Let me check."},
                    {
                        "toolUse": {
                            "toolUseId": "t1",
                            "name": "get_weather",
                            "input": {"city": "Paris"},
                        }
                    },
                ],
            }
        },
        "stopReason": "tool_use",
        "usage": {"inputTokens": 5, "outputTokens": 7, "totalTokens": 12},
        "metrics": {"latencyMs": 3},
    }
    result = BedrockAdapter(provider()).unary_result(
        make_call(stream=False), json.dumps(answer).encode()
    )
    completion = json.loads(result.body)
    message = completion["choices"][0]["message"]
    assert message["content"] == "Let me check."
    assert message["reasoning_content"] == "think"
    assert message["tool_calls"][0]["id"] == "t1"
    assert json.loads(message["tool_calls"][0]["function"]["arguments"]) == {"city": "Paris"}
    assert completion["choices"][0]["finish_reason"] == "tool_calls"
    assert completion["usage"]["total_tokens"] == 12
    assert result.usage is not None
    assert result.usage.prompt_tokens == 5
    assert completion["object"] == "chat.completion"


@pytest.mark.parametrize(
    ("status", "kind", "retryable"),
    [
        (429, "ThrottlingException", True),
        (400, "ValidationException", False),
        (503, "ServiceUnavailableException", True),
    ],
)
def test_error_from_response(status: int, kind: str, retryable: bool) -> None:
    err = BedrockAdapter(provider()).error_from_response(
        status,
        b'{"message":"nope"}',
        {"X-Amzn-ErrorType": f"{kind}:http://internal.amazon.com/coral/com.amazon.bedrock/"},
    )
    assert isinstance(err, UpstreamStatusError)
    assert err.code == kind
    assert err.retryable is retryable
    assert str(err) == "nope"


def test_error_without_json_body() -> None:
    err = BedrockAdapter(provider()).error_from_response(500, b"<html>oops</html>", {})
    assert err.retryable
    assert "oops" in str(err)
