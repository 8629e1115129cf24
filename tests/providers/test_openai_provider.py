"""OpenAI adapter: the forwarded body, the request, the stream translator, error mapping,
and what the client is told when every attempt failed (upstream/outcome.py)."""

from __future__ import annotations

import copy
import json
from typing import Any

import msgspec
import pytest

from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStatusError
from gateway.errors import UpstreamStreamError
from gateway.errors import UpstreamTimeout
from gateway.framing.sse import SSEDecoder
from gateway.framing.sse import SSEEvent
from gateway.providers.base import UpstreamCall
from gateway.providers.openai.adapter import ChatStreamTranslator
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.adapter import error_from_body
from gateway.providers.openai.adapter import upstream_body
from gateway.providers.registry import provider_config
from gateway.upstream.outcome import final_error
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import ChatRequest
from tests.fixtures import FIXTURES

SECRET = "sk-test-0123456789abcdef"

# A client body with what the gateway must not disturb: unknown fields, "", nulls, nesting,
# unicode, numbers whose JSON spelling matters.
CLIENT_BODY: dict[str, Any] = {
    "model": "smart",
    "messages": [
        {"role": "system", "content": ""},
        {"role": "user", "content": [{"type": "text", "text": "héllo ✓ \u2028"}]},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": ""},
    ],
    "temperature": 0.1,
    "top_p": 1,
    "seed": 12345678901234567890,
    "user": None,
    "metadata": {},
    "stop": [],
    "logit_bias": {"50256": -100},
    "unknown_vendor_field": {"nested": [1, None, "", {"deep": False}]},
    "extra_null": None,
    "extra_empty": "",
}


def provider(base_url: str | None = None, key: str | None = SECRET) -> ProviderConfig:
    keys = [ProviderKey(key=Secret(key))] if key is not None else []
    return provider_config(name="up", kind="openai", base_url=base_url, keys=keys)


def call(
    body: dict[str, Any] | None = None,
    *,
    stream: bool = False,
    key: ProviderKey | None = None,
    model: str = "gpt-upstream",
    config: ProviderConfig | None = None,
) -> UpstreamCall:
    body = copy.deepcopy(CLIENT_BODY) if body is None else body
    return UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=config or provider(),
        key=key,
        model=model,
        stream=stream,
        request_id="req-1",
    )


def sent(c: UpstreamCall) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(upstream_body(c))
    return result


# --- upstream_body ----------------------------------------------------------------------------


def test_non_stream_body_is_the_client_body_with_the_upstream_model() -> None:
    assert sent(call()) == {**CLIENT_BODY, "model": "gpt-upstream"}


def test_non_stream_body_keeps_stream_fields_as_sent() -> None:
    body = {**copy.deepcopy(CLIENT_BODY), "stream": False, "stream_options": {"x": 1}}
    assert sent(call(body)) == {**body, "model": "gpt-upstream"}
    assert "stream" not in sent(call())
    assert "stream_options" not in sent(call())


def test_stream_body_asks_for_usage_and_keeps_everything_else() -> None:
    body = {**copy.deepcopy(CLIENT_BODY), "stream": True}
    assert sent(call(body, stream=True)) == {
        **body,
        "model": "gpt-upstream",
        "stream": True,
        "stream_options": {"include_usage": True},
    }


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (UNSET, {"include_usage": True}),
        (None, {"include_usage": True}),
        ({}, {"include_usage": True}),
        ({"include_usage": False}, {"include_usage": True}),
        ({"include_usage": True}, {"include_usage": True}),
        (
            {"include_obfuscation": False},
            {"include_obfuscation": False, "include_usage": True},
        ),
        (
            {"include_obfuscation": False, "include_usage": None, "future_option": "x"},
            {"include_obfuscation": False, "include_usage": True, "future_option": "x"},
        ),
    ],
)
def test_stream_options_gain_include_usage_and_keep_other_keys(
    options: Any, expected: dict[str, Any]
) -> None:
    body: dict[str, Any] = {"model": "smart", "messages": [], "stream": True}
    if options is not UNSET:
        body["stream_options"] = options
    out = sent(call(body, stream=True))
    assert out["stream_options"] == expected
    assert out["stream"] is True


def test_stream_is_set_even_when_the_client_did_not_ask() -> None:
    # Non-streaming clients of providers served by streaming (e.g. the mock) still stream.
    body = {"model": "smart", "messages": [], "stream": False}
    out = sent(call(body, stream=True))
    assert out["stream"] is True
    assert out["stream_options"] == {"include_usage": True}


def test_upstream_body_does_not_change_the_client_body() -> None:
    body = {**copy.deepcopy(CLIENT_BODY), "stream": True, "stream_options": {"a": 1}}
    before = copy.deepcopy(body)
    options = body["stream_options"]
    c = call(body, stream=True)
    upstream_body(c)
    upstream_body(c)  # a second attempt starts from the same client body
    assert c.body == before
    assert c.body["stream_options"] is options


def test_each_attempt_gets_its_own_model() -> None:
    body = copy.deepcopy(CLIENT_BODY)
    assert sent(call(body, model="a"))["model"] == "a"
    assert sent(call(body, model="b/with-slash"))["model"] == "b/with-slash"
    assert body["model"] == "smart"


def test_empty_strings_and_nulls_are_forwarded_byte_for_byte() -> None:
    raw = upstream_body(call())
    assert b'{"role":"system","content":""}' in raw
    assert b'"content":null' in raw
    assert b'"extra_null":null' in raw
    assert b'"extra_empty":""' in raw
    assert b'"arguments":""' in raw
    assert b'"seed":12345678901234567890' in raw
    assert b'"temperature":0.1' in raw


# --- build_request ----------------------------------------------------------------------------


def test_key_goes_only_in_the_authorization_header() -> None:
    key = ProviderKey(key=Secret(SECRET))
    request = OpenAIAdapter(provider()).build_request(call(stream=True, key=key))
    assert request.headers["Authorization"] == f"Bearer {SECRET}"
    others = {k: v for k, v in request.headers.items() if k != "Authorization"}
    assert SECRET not in repr(others)
    assert SECRET not in request.url
    assert SECRET.encode() not in request.body


@pytest.mark.parametrize(
    "key",
    [None, ProviderKey(key=None), ProviderKey(key=Secret(""))],
    ids=["none", "no-key", "empty"],
)
def test_no_authorization_header_without_a_key(key: ProviderKey | None) -> None:
    request = OpenAIAdapter(provider(key=None)).build_request(call(key=key))
    assert "authorization" not in {name.lower() for name in request.headers}


@pytest.mark.parametrize(
    ("base_url", "url"),
    [
        ("http://up.test/v1", "http://up.test/v1/chat/completions"),
        ("http://up.test/v1/", "http://up.test/v1/chat/completions"),
        ("https://proxy.test/openai/v1//", "https://proxy.test/openai/v1/chat/completions"),
        (None, "https://api.openai.com/v1/chat/completions"),
    ],
)
def test_url_is_base_url_plus_chat_completions(base_url: str | None, url: str) -> None:
    config = provider(base_url)
    assert OpenAIAdapter(config).build_request(call(config=config)).url == url


def test_request_shape_for_stream_and_not() -> None:
    adapter = OpenAIAdapter(provider())
    streamed = adapter.build_request(call(stream=True))
    unary = adapter.build_request(call(stream=False))
    for request in (streamed, unary):
        assert request.method == "POST"
        assert request.headers["Content-Type"] == "application/json"
        assert request.playback is None
    assert streamed.headers["Accept"] == "text/event-stream"
    assert "Accept" not in unary.headers
    assert streamed.body == upstream_body(call(stream=True))
    assert unary.body == upstream_body(call(stream=False))
    assert (adapter.framing, adapter.native_unary) == ("sse", True)


# --- ChatStreamTranslator ---------------------------------------------------------------------

CHUNK = (
    b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}],"obfuscation":"x"}'
)


def test_feed_returns_the_chunk_with_its_raw_bytes() -> None:
    translator = ChatStreamTranslator()
    (out,) = translator.feed(SSEEvent(CHUNK))
    assert out.raw == CHUNK
    assert out.chunk.choices[0].delta.content == "hi"
    assert translator.done is False


def test_done_marker_ends_the_stream() -> None:
    translator = ChatStreamTranslator()
    translator.feed(SSEEvent(CHUNK))
    assert translator.feed(SSEEvent(b"[DONE]")) == []
    assert translator.done is True
    assert translator.close() == []


@pytest.mark.parametrize("data", [b"", b" ", b"\n", b" \t "])
def test_blank_data_is_skipped(data: bytes) -> None:
    translator = ChatStreamTranslator()
    assert translator.feed(SSEEvent(data)) == []
    assert translator.done is False


@pytest.mark.parametrize(
    ("detail", "message", "code", "param"),
    [
        (
            {"message": "The server had an error", "type": "server_error", "code": "boom"},
            "The server had an error",
            "boom",
            None,
        ),
        (
            {"message": "Too many tokens", "code": 429, "param": "messages"},
            "Too many tokens",
            "429",
            "messages",
        ),
        (
            {"message": "", "code": None},
            "the upstream reported an error mid-stream",
            "upstream_stream_error",  # the class's own code when the upstream gave none
            None,
        ),
    ],
)
def test_error_event_raises_upstream_stream_error(
    detail: dict[str, Any], message: str, code: str | None, param: str | None
) -> None:
    translator = ChatStreamTranslator()
    translator.feed(SSEEvent(CHUNK))
    with pytest.raises(UpstreamStreamError) as info:
        translator.feed(SSEEvent(json.dumps({"error": detail}).encode()))
    err = info.value
    assert (err.message, err.code, err.param) == (message, code, param)
    assert err.retryable is True  # before the commit point another target may answer
    assert translator.done is False


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        b'{"id":"c1","choices":[',
        b'{"choices":"not a list"}',
        b"[1,2,3]",
        b"data: {}",
        b'"[DONE]"',
    ],
)
def test_malformed_chunk_raises_protocol_error(data: bytes) -> None:
    with pytest.raises(UpstreamProtocolError, match="malformed chunk"):
        ChatStreamTranslator().feed(SSEEvent(data))


@pytest.mark.parametrize(
    "name", ["openai_chat_parallel_tools.sse", "openai_chat_parallel_tools_sdk_fixture.sse"]
)
def test_recorded_stream_translates_event_by_event(name: str) -> None:
    decoder = SSEDecoder()
    events = decoder.feed((FIXTURES / name).read_bytes()) + decoder.close()
    translator = ChatStreamTranslator()
    raws = []
    for event in events:
        assert translator.done is False
        raws += [t.raw for t in translator.feed(event)]
    assert translator.done is True
    assert raws == [e.data for e in events[:-1]]


def test_chunk_with_logprobs_translates() -> None:
    data = (
        b'{"id":"c1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index"'
        b':0,"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.1,'
        b'"bytes":[97],"top_logprobs":[]}],"refusal":null},"finish_reason":null}]}'
    )
    (out,) = ChatStreamTranslator().feed(SSEEvent(data))
    assert out.raw == data


# --- error_from_body --------------------------------------------------------------------------


def openai_error(message: str, type: str, param: str | None, code: str | int | None) -> bytes:
    return json.dumps(
        {"error": {"message": message, "type": type, "param": param, "code": code}}
    ).encode()


@pytest.mark.parametrize("status", [408, 409, 429, 500, 502, 503, 529])
def test_rate_limit_and_server_errors_are_retryable(status: int) -> None:
    err = error_from_body(status, openai_error("nope", "server_error", None, "some_code"))
    assert isinstance(err, UpstreamStatusError)
    assert err.retryable is True
    assert err.upstream_status == status
    assert err.message == "nope"
    assert err.code == "some_code"
    assert err.type == "upstream_error"  # not the upstream's: this is not the client's fault


@pytest.mark.parametrize("status", [401, 403])
def test_credential_errors_are_retryable_and_never_quote_the_upstream(status: int) -> None:
    body = openai_error(
        "Incorrect API key provided: sk-ab***********yz.", "invalid_request_error", None, "x"
    )
    err = error_from_body(status, body)
    assert isinstance(err, UpstreamStatusError)
    assert err.retryable is True
    assert err.upstream_status == status
    assert "sk-ab" not in err.message
    assert "Incorrect API key" not in err.message
    assert str(status) in err.message
    assert "sk-ab" not in error_from_body(status, b"Incorrect API key sk-ab**yz").message


@pytest.mark.parametrize(
    ("status", "param", "code"),
    [
        (400, "messages[3]", "invalid_value"),
        (404, None, "model_not_found"),
        (422, "temperature", 42),
        (413, None, None),
    ],
)
def test_client_faults_are_not_retryable_and_keep_the_upstream_fields(
    status: int, param: str | None, code: str | int | None
) -> None:
    err = error_from_body(
        status, openai_error("Invalid thing", "invalid_request_error", param, code)
    )
    assert isinstance(err, UpstreamStatusError)
    assert err.retryable is False
    assert err.upstream_status == status
    assert (err.message, err.type, err.param) == ("Invalid thing", "invalid_request_error", param)
    assert err.code == (str(code) if code is not None else "upstream_status")


def test_recorded_openai_error_bodies_keep_their_fields() -> None:
    entries = json.loads((FIXTURES / "error_bodies.json").read_text())
    chat = [e for e in entries if e["_endpoint"] == "POST /v1/chat/completions"]
    assert chat
    for entry in chat:
        detail = entry["body"]["error"]
        err = error_from_body(entry["_status"], json.dumps(entry["body"]).encode())
        assert (err.message, err.type, err.param, err.code) == (
            detail["message"],
            detail["type"],
            detail["param"],
            detail["code"],
        )
        assert err.retryable is False


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (502, b"<html><body>Bad gateway</body></html>\n", "<html><body>Bad gateway</body></html>"),
        (
            503,
            b"upstream connect error or disconnect/reset",
            "upstream connect error or disconnect/reset",
        ),
        (400, b"", "upstream answered HTTP 400"),
        (500, b"   \n", "upstream answered HTTP 500"),
        (
            500,
            b'{"error": "the model failed to generate a response"}',
            '{"error": "the model failed to generate a response"}',
        ),
        (
            400,
            b'{"message": "The provided model identifier is invalid."}',
            '{"message": "The provided model identifier is invalid."}',
        ),
        (400, b"\xff\xfe not utf-8", "\ufffd\ufffd not utf-8"),
    ],
)
def test_other_bodies_become_a_message_excerpt(status: int, body: bytes, message: str) -> None:
    err = error_from_body(status, body)
    assert err.message == message
    assert err.upstream_status == status
    assert err.retryable is (status >= 500)


def test_long_non_json_body_is_cut() -> None:
    err = error_from_body(500, b"x" * 10_000)
    assert err.message == "x" * 300


def test_adapter_maps_error_responses_the_same_way() -> None:
    body = openai_error("Invalid 'messages[3]'", "invalid_request_error", "messages[3]", "x")
    err = OpenAIAdapter(provider()).error_from_response(400, body, {})
    assert (err.message, err.param, err.code, err.retryable) == (
        "Invalid 'messages[3]'",
        "messages[3]",
        "x",
        False,
    )


# --- final_error ------------------------------------------------------------------------------


def rate_limited(message: str = "slow down") -> UpstreamError:
    return error_from_body(
        429, openai_error(message, "rate_limit_error", None, "rate_limit_exceeded")
    )


def server_error() -> UpstreamError:
    return error_from_body(500, openai_error("boom", "server_error", None, None))


def refused() -> UpstreamError:
    return error_from_body(
        400,
        openai_error(
            "Invalid 'messages[3]'", "invalid_request_error", "messages[3]", "invalid_value"
        ),
    )


@pytest.mark.parametrize("count", [1, 2, 4])
def test_every_attempt_rate_limited_is_a_429(count: int) -> None:
    errors = [rate_limited(f"slow down {i}") for i in range(count)]
    err = final_error(errors)
    assert err.status == 429
    assert err.type == "rate_limit_error"
    assert err.code == "rate_limit_exceeded"
    assert f"({count} tried)" in err.message
    assert f"slow down {count - 1}" in err.message


@pytest.mark.parametrize(
    "before", [[], [server_error()], [rate_limited()], [rate_limited(), refused()]]
)
def test_last_failure_a_timeout_is_a_504(before: list[UpstreamError]) -> None:
    timeout = UpstreamTimeout("no first byte within 2s")
    err = final_error([*before, timeout])
    assert err is timeout
    assert err.status == 504
    assert err.type == "timeout_error"


def test_last_failure_a_refusal_keeps_the_upstream_status_and_fields() -> None:
    err = final_error([server_error(), refused()])
    assert err.status == 400
    assert (err.message, err.type, err.param, err.code) == (
        "Invalid 'messages[3]'",
        "invalid_request_error",
        "messages[3]",
        "invalid_value",
    )


def test_upstream_404_stays_a_404() -> None:
    err = final_error(
        [
            error_from_body(
                404, openai_error("no such model", "invalid_request_error", None, "model_not_found")
            )
        ]
    )
    assert (err.status, err.code) == (404, "model_not_found")


@pytest.mark.parametrize(
    "errors",
    [
        [server_error()],
        [rate_limited(), server_error()],
        [server_error(), rate_limited(), error_from_body(401, b"bad key")],
        [refused(), server_error()],
        [UpstreamTimeout("idle"), server_error()],
        [UpstreamConnectError("connection refused")],
        [rate_limited(), UpstreamStreamError("mid-stream failure")],
        [UpstreamProtocolError("upstream sent a malformed chunk")],
        [UpstreamStatusError("odd", retryable=False)],  # no upstream status to keep
    ],
    ids=[
        "500",
        "429-then-500",
        "500-429-401",
        "400-then-500",
        "timeout-then-500",
        "connect",
        "429-then-stream-error",
        "protocol",
        "non-retryable-without-status",
    ],
)
def test_anything_else_is_a_502(errors: list[UpstreamError]) -> None:
    last = errors[-1]
    err = final_error(errors)
    assert err.status == 502
    assert err is last
