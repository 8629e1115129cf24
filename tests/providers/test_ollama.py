"""Ollama adapter: the request (URL, headers, body), the stream translator on recorded NDJSON
streams, the split-anywhere property, the non-streaming answer and error mapping."""

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
from gateway.errors import BadRequest
from gateway.errors import FramingError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStatusError
from gateway.errors import UpstreamStreamError
from gateway.framing.ndjson import NDJSONDecoder
from gateway.providers.base import Translated
from gateway.providers.base import UpstreamCall
from gateway.providers.ollama.adapter import OllamaAdapter
from gateway.providers.ollama.adapter import OllamaStreamTranslator
from gateway.providers.ollama.adapter import finish_reason
from gateway.providers.registry import make_adapter
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.wire.openai_chat import ChatRequest
from tests.fixtures import FIXTURES
from tests.providers.stream_view import client_chunks

SECRET = "ol-test-0123456789"
HI: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
TOOLS_FIXTURE = "ollama_chat_tools.ndjson"
DOCS_FIXTURE = "ollama_chat_tools_docs_example.ndjson"
ERROR_FIXTURE = "ollama_stream_error.ndjson"


def provider(base_url: str | None = None, keys: list[ProviderKey] | None = None) -> ProviderConfig:
    return provider_config(name="ol", kind="ollama", base_url=base_url, keys=keys or [])


def make_call(
    body: dict[str, Any] | None = None,
    *,
    stream: bool = True,
    key: str | None = None,
    model: str = "qwen2.5:7b",
) -> UpstreamCall:
    body = body or {"model": "ol/x", "messages": HI}
    config = provider(keys=[ProviderKey(key=Secret(key))] if key is not None else [])
    return UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=config,
        key=config.keys[0] if config.keys else None,
        model=model,
        stream=stream,
        request_id="req1",
        created=1700000000,
    )


def sent_body(body: dict[str, Any], *, stream: bool = True) -> dict[str, Any]:
    request = OllamaAdapter(provider()).build_request(make_call(body, stream=stream))
    result: dict[str, Any] = json.loads(request.body)
    return result


def fixture(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


def translate(data: bytes, cuts: list[int] | None = None) -> tuple[list[Translated], bool]:
    """Bytes through NDJSONDecoder and the translator, cut at `cuts`; (items, done), the
    items as the client sees them (`client_chunks`: tool calls numbered per stream)."""
    translator = OllamaStreamTranslator(make_call())
    decoder = NDJSONDecoder()
    bounds = [0, *sorted(cuts or []), len(data)]
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


# --- request: URL and headers ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        (None, "http://localhost:11434/api/chat"),
        ("http://127.0.0.1:9/", "http://127.0.0.1:9/api/chat"),
    ],
)
def test_url_for_stream_and_unary(base_url: str | None, url: str) -> None:
    adapter = OllamaAdapter(provider(base_url))
    assert adapter.build_request(make_call(stream=True)).url == url
    assert adapter.build_request(make_call(stream=False)).url == url
    assert adapter.framing == "ndjson"
    assert adapter.native_unary is True
    assert adapter.token_source(None) is None


def test_no_authorization_without_keys_or_with_an_empty_key() -> None:
    adapter = OllamaAdapter(provider())
    for call in (make_call(), make_call(key="")):
        headers = adapter.build_request(call).headers
        assert "Authorization" not in headers
        assert headers["Content-Type"] == "application/json"


def test_a_key_is_sent_as_a_bearer_token_only_in_the_header() -> None:
    request = OllamaAdapter(provider()).build_request(make_call(key=SECRET))
    assert request.headers["Authorization"] == "Bearer " + SECRET
    assert SECRET.encode() not in request.body
    assert SECRET not in request.url


def test_registry_knows_the_ollama_kind() -> None:
    assert isinstance(make_adapter(provider()), OllamaAdapter)


# --- request: body ---------------------------------------------------------------------------


def test_minimal_body() -> None:
    assert sent_body({"model": "m", "messages": HI}) == {
        "model": "qwen2.5:7b",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
    }
    assert sent_body({"model": "m", "messages": HI}, stream=False)["stream"] is False


def test_options_format_and_think() -> None:
    body = sent_body(
        {
            "model": "m",
            "messages": HI,
            "temperature": 0.2,
            "top_p": 0.9,
            "seed": 7,
            "stop": "END",
            "max_completion_tokens": 64,
            "max_tokens": 10,
            "presence_penalty": 0.5,
            "frequency_penalty": 0.25,
            "response_format": {"type": "json_object"},
            "reasoning_effort": "high",
            "user": "u1",
            "metadata": {"a": "b"},
            "parallel_tool_calls": True,
            "stream_options": {"include_usage": True},
        }
    )
    assert body["options"] == {
        "temperature": 0.2,
        "top_p": 0.9,
        "seed": 7,
        "stop": ["END"],
        "num_predict": 64,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
    }
    assert body["format"] == "json"
    assert body["think"] == "high"
    assert set(body) == {"model", "messages", "stream", "options", "format", "think"}


def test_max_tokens_and_stop_list_and_json_schema() -> None:
    schema = {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]}
    body = sent_body(
        {
            "model": "m",
            "messages": HI,
            "max_tokens": 10,
            "stop": ["a", "b"],
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "x", "schema": schema},
            },
        }
    )
    assert body["options"] == {"num_predict": 10, "stop": ["a", "b"]}
    assert body["format"] == schema


@pytest.mark.parametrize(
    ("effort", "think"), [("none", False), ("minimal", "low"), ("low", "low"), ("medium", "medium")]
)
def test_reasoning_effort_maps_to_think(effort: str, think: bool | str) -> None:
    assert sent_body({"model": "m", "messages": HI, "reasoning_effort": effort})["think"] == think


def test_text_response_format_sends_no_format() -> None:
    body = sent_body({"model": "m", "messages": HI, "response_format": {"type": "text"}})
    assert "format" not in body


def test_messages_tools_and_tool_results() -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "developer",
            "content": [{"type": "text", "text": "dev "}, {"type": "text", "text": "rules"}],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "what is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0K"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": "let me think",
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {"id": "c2", "type": "function", "function": {"name": "now", "arguments": ""}},
            ],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "noon"},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "sunny"}]},
        {"role": "tool", "tool_call_id": "unknown", "content": "?"},
        {"role": "assistant", "content": ""},
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        {"type": "function", "function": {"name": "now"}},
    ]
    body = sent_body({"model": "m", "messages": messages, "tools": tools})
    assert body["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "system", "content": "dev rules"},
        {"role": "user", "content": "what is this?", "images": ["iVBORw0K"]},
        {
            "role": "assistant",
            "content": "",
            "thinking": "let me think",
            "tool_calls": [
                {"function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                {"function": {"name": "now", "arguments": {}}},
            ],
        },
        {"role": "tool", "content": "noon", "tool_name": "now"},
        {"role": "tool", "content": "sunny", "tool_name": "get_weather"},
        {"role": "tool", "content": "?"},
        {"role": "assistant", "content": ""},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        },
        {"type": "function", "function": {"name": "now"}},
    ]


def test_tool_choice() -> None:
    tools = [
        {"type": "function", "function": {"name": "a"}},
        {"type": "function", "function": {"name": "b"}},
    ]
    base = {"model": "m", "messages": HI, "tools": tools}
    assert "tools" not in sent_body({**base, "tool_choice": "none"})
    assert len(sent_body({**base, "tool_choice": "auto"})["tools"]) == 2
    assert len(sent_body({**base, "tool_choice": "required"})["tools"]) == 2
    only = sent_body({**base, "tool_choice": {"type": "function", "function": {"name": "b"}}})
    assert [t["function"]["name"] for t in only["tools"]] == ["b"]
    with pytest.raises(BadRequest) as info:
        sent_body({**base, "tool_choice": "sometimes"})
    assert info.value.param == "tool_choice"


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"n": 2}, "n"),
        ({"logprobs": True}, "logprobs"),
        ({"modalities": ["text", "audio"]}, "modalities"),
        ({"logit_bias": {"1": 2.0}}, "logit_bias"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"response_format": {"type": "grammar"}}, "response_format"),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}],
                    }
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}
                ]
            },
            "messages[0].content[0]",
        ),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": "c",
                                "type": "function",
                                "function": {"name": "f", "arguments": "[1]"},
                            }
                        ],
                    }
                ]
            },
            "messages[0].tool_calls[0].function",
        ),
    ],
)
def test_rejected_fields(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as info:
        sent_body({"model": "m", "messages": HI, **extra})
    assert info.value.param == param


# --- stream: recorded fixtures ---------------------------------------------------------------


def test_recorded_two_calls_keep_the_server_ids_and_get_indexes_0_1() -> None:
    items, done = translate(fixture(TOOLS_FIXTURE))
    assert done
    assert chunks(items)[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert tool_deltas(items) == [
        {
            "index": 0,
            "id": "call_dwjfhc0f",
            "type": "function",
            "function": {
                "name": "get_current_weather",
                "arguments": '{"format":"celsius","location":"北京"}',
            },
        },
        {
            "index": 1,
            "id": "call_e8ymdkla",
            "type": "function",
            "function": {
                "name": "get_history_weather",
                "arguments": '{"format":"celsius","location":"洛阳"}',
            },
        },
    ]
    assert finishes(items) == ["tool_calls"]
    last = items[-1].chunk
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (  # type: ignore[union-attr]
        316,
        56,
        372,
    )
    acc = accumulate(items)
    message = acc.message()
    assert [c.function.name for c in message.tool_calls or []] == [
        "get_current_weather",
        "get_history_weather",
    ]
    assert acc.unfinished_choices() == []


def test_docs_example_without_id_or_index_gets_a_minted_id() -> None:
    items, done = translate(fixture(DOCS_FIXTURE))
    assert done
    assert tool_deltas(items) == [
        {
            "index": 0,
            "id": "call_req1_0",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":"Tokyo"}'},
        }
    ]
    assert finishes(items) == ["tool_calls"]


def test_error_line_mid_stream_raises() -> None:
    with pytest.raises(UpstreamStreamError) as info:
        translate(fixture(ERROR_FIXTURE))
    assert info.value.message == "an error was encountered while running the model"


@settings(max_examples=150, deadline=None)
@given(
    name=st.sampled_from([TOOLS_FIXTURE, DOCS_FIXTURE]),
    cuts=st.lists(st.integers(min_value=0, max_value=2048), max_size=10),
)
def test_split_anywhere_gives_the_same_chunks(name: str, cuts: list[int]) -> None:
    data = fixture(name)
    whole, _ = translate(data)
    items, done = translate(data, [c % (len(data) + 1) for c in cuts])
    assert done
    assert chunks(items) == chunks(whole)
    assert accumulate(items).message() == accumulate(whole).message()


@settings(max_examples=50, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=2048), max_size=10))
def test_split_anywhere_error_fixture_always_raises(cuts: list[int]) -> None:
    data = fixture(ERROR_FIXTURE)
    with pytest.raises(UpstreamStreamError):
        translate(data, [c % (len(data) + 1) for c in cuts])


def lines(*objs: dict[str, Any]) -> bytes:
    return b"".join(json.dumps(o).encode() + b"\n" for o in objs)


def test_text_thinking_and_length() -> None:
    data = lines(
        {"message": {"role": "assistant", "content": "", "thinking": "hmm"}, "done": False},
        {"message": {"role": "assistant", "content": "Hel"}, "done": False},
        {"message": {"role": "assistant", "content": "lo"}, "done": False},
        {
            "message": {"role": "assistant", "content": ""},
            "done": True,
            "done_reason": "length",
            "prompt_eval_count": 5,
            "eval_count": 3,
        },
        {"message": {"role": "assistant", "content": "after done"}, "done": False},
    )
    items, done = translate(data)
    assert done
    acc = accumulate(items)
    assert acc.message().content == "Hello"
    assert acc.message().reasoning_content == "hmm"
    assert finishes(items) == ["length"]
    assert acc.usage is not None
    assert (acc.usage.prompt_tokens, acc.usage.completion_tokens) == (5, 3)


def test_calls_with_hint_indexes_and_odd_arguments_use_the_gateway_counter() -> None:
    data = lines(
        {"message": {"tool_calls": [{"function": {"index": 5, "name": "a", "arguments": {}}}]}},
        {
            "message": {
                "tool_calls": [
                    {"function": {"index": 0, "name": "b"}},
                    {
                        "id": "call_x",
                        "function": {"index": 0, "name": "c", "arguments": {"k": [1]}},
                    },
                ]
            }
        },
        {"done": True, "done_reason": "stop"},
    )
    items, _ = translate(data)
    deltas = tool_deltas(items)
    assert [(d["index"], d["id"], d["function"]["arguments"]) for d in deltas] == [
        (0, "call_req1_0", "{}"),
        (1, "call_req1_1", "{}"),
        (2, "call_x", '{"k":[1]}'),
    ]
    assert finishes(items) == ["tool_calls"]


def test_no_done_line_leaves_the_stream_unfinished() -> None:
    items, done = translate(lines({"message": {"content": "partial"}, "done": False}))
    assert not done
    assert accumulate(items).unfinished_choices() == [0]


def test_malformed_line_is_a_protocol_error() -> None:
    with pytest.raises(UpstreamProtocolError):
        translate(b'{"message": \n')


def test_an_oversized_line_is_a_framing_error() -> None:
    with pytest.raises(FramingError):
        NDJSONDecoder(16).feed(b'{"message": {"content": "far too long"}}\n')


@pytest.mark.parametrize(
    ("reason", "calls", "expected"),
    [
        ("stop", False, "stop"),
        ("length", False, "length"),
        ("load", False, "stop"),
        ("stop", True, "tool_calls"),
        ("length", True, "tool_calls"),
    ],
)
def test_finish_reason(reason: str, calls: bool, expected: str) -> None:
    assert finish_reason(reason, calls) == expected


# --- non-streaming ---------------------------------------------------------------------------


def test_unary_text() -> None:
    answer = {
        "model": "qwen2.5:7b",
        "message": {"role": "assistant", "content": "Hello!", "thinking": "greet"},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 9,
        "eval_count": 2,
    }
    call = make_call(stream=False)
    result = OllamaAdapter(provider()).unary_result(call, json.dumps(answer).encode())
    body = json.loads(result.body)
    assert body["object"] == "chat.completion"
    assert body["id"] == "chatcmpl-req1"
    assert body["choices"] == [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello!", "reasoning_content": "greet"},
            "finish_reason": "stop",
            "logprobs": None,
        }
    ]
    assert body["usage"] == {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11}
    assert result.usage is not None
    assert result.usage.total_tokens == 11
    assert result.model == "qwen2.5:7b"


def test_unary_tool_calls() -> None:
    answer = {
        "message": {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_abc", "function": {"index": 0, "name": "a", "arguments": {"x": 1}}},
                {"function": {"name": "b", "arguments": {}}},
            ],
        },
        "done": True,
        "done_reason": "stop",
    }
    result = OllamaAdapter(provider()).unary_result(
        make_call(stream=False), json.dumps(answer).encode()
    )
    choice = json.loads(result.body)["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    assert choice["message"]["tool_calls"] == [
        {"id": "call_abc", "function": {"name": "a", "arguments": '{"x":1}'}, "type": "function"},
        {"id": "call_req1_1", "function": {"name": "b", "arguments": "{}"}, "type": "function"},
    ]


def test_unary_error_body_in_a_200() -> None:
    with pytest.raises(UpstreamStreamError):
        OllamaAdapter(provider()).unary_result(make_call(stream=False), b'{"error": "boom"}')


def test_unary_malformed() -> None:
    with pytest.raises(UpstreamProtocolError):
        OllamaAdapter(provider()).unary_result(make_call(stream=False), b"not json")


# --- errors ----------------------------------------------------------------------------------


def test_http_errors() -> None:
    adapter = OllamaAdapter(provider())
    missing = adapter.error_from_response(404, b'{"error":"model \\"x\\" not found"}', {})
    assert isinstance(missing, UpstreamStatusError)
    assert missing.message == 'model "x" not found'
    assert not missing.retryable
    assert missing.upstream_status == 404
    crash = adapter.error_from_response(500, b'{"error":"llama runner crashed"}', {})
    assert crash.retryable
    assert crash.message == "llama runner crashed"
    proxy = adapter.error_from_response(502, b"<html>bad gateway</html>", {})
    assert proxy.retryable
    assert "bad gateway" in proxy.message
    empty = adapter.error_from_response(503, b"", {})
    assert empty.message == "upstream answered HTTP 503"
    auth = adapter.error_from_response(401, b'{"error":"bad key ol-abc"}', {})
    assert "ol-abc" not in auth.message
