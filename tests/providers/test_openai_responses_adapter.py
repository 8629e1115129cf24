"""The openai and azure adapters with `api: responses`: URL, headers and body (translated,
or a Responses client's own), the stream translator they pick, and the non-streaming answer
converted to `chat.completion` (or kept as it came, for a Responses client)."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import UpstreamProtocolError
from gateway.errors import UpstreamStreamError
from gateway.providers.azure.adapter import AzureAdapter
from gateway.providers.base import NativeRequest
from gateway.providers.base import UpstreamCall
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.responses import ResponsesStreamTranslator
from gateway.providers.registry import provider_config
from gateway.wire.openai_chat import ChatRequest
from tests.upstreams.openai_responses_upstream import PARALLEL
from tests.upstreams.openai_responses_upstream import REASONING_PIECES
from tests.upstreams.openai_responses_upstream import TEXT
from tests.upstreams.openai_responses_upstream import USAGE
from tests.upstreams.openai_responses_upstream import call_id
from tests.upstreams.openai_responses_upstream import script
from tests.upstreams.openai_upstream import EXPECTED_ARGS
from tests.upstreams.openai_upstream import TEXT_PIECES

HI: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]


# --- the adapters --------------------------------------------------------------------------


def provider(
    kind: str = "openai", base_url: str | None = None, api_version: str | None = None
) -> ProviderConfig:
    # an azure provider always has an api_version (its config requires one)
    azure = {"api_version": api_version or "v1"} if kind == "azure" else {}
    return provider_config(
        name="up", kind=kind, base_url=base_url, keys=[ProviderKey(key=Secret("k-123"))], **azure
    )


def call(
    config: ProviderConfig, *, stream: bool = True, native: dict[str, Any] | None = None
) -> UpstreamCall:
    body: dict[str, Any] = {"model": "smart", "messages": HI}
    return UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=config,
        key=config.keys[0],
        model="gpt-5-deploy",
        stream=stream,
        request_id="req-1",
        api="responses",
        native=NativeRequest(api="responses", body=native) if native is not None else None,
    )


def test_openai_url_headers_and_body() -> None:
    config = provider(base_url="https://example.test/v1")
    request = OpenAIAdapter(config).build_request(call(config))
    assert request.url == "https://example.test/v1/responses"
    assert request.headers["Authorization"] == "Bearer k-123"
    assert request.headers["Accept"] == "text/event-stream"
    body = json.loads(request.body)
    assert body["model"] == "gpt-5-deploy"
    assert body["input"] == [{"type": "message", "role": "user", "content": "hi"}]
    assert isinstance(OpenAIAdapter(config).translator(call(config)), ResponsesStreamTranslator)


def test_chat_api_is_unchanged() -> None:
    config = provider()
    chat_call = msgspec.structs.replace(call(config), api="chat")
    request = OpenAIAdapter(config).build_request(chat_call)
    assert request.url == "https://api.openai.com/v1/chat/completions"
    assert "input" not in json.loads(request.body)


def test_native_body_is_the_clients_with_model_stream_and_store_set() -> None:
    native = {"model": "smart", "input": "hi", "instructions": "", "store": True, "vendor": [None]}
    config = provider()
    request = OpenAIAdapter(config).build_request(call(config, stream=False, native=native))
    assert json.loads(request.body) == {
        "model": "gpt-5-deploy",
        "input": "hi",
        "instructions": "",
        "store": False,
        "stream": False,
        "vendor": [None],
    }
    assert native["model"] == "smart"  # the client's body is not changed in place


@pytest.mark.parametrize(
    ("base_url", "api_version", "url"),
    [
        (
            "https://res.openai.azure.com",
            "2025-04-01-preview",
            "https://res.openai.azure.com/openai/responses?api-version=2025-04-01-preview",
        ),
        (
            "https://res.openai.azure.com/openai",
            "2025-03-01-preview",
            "https://res.openai.azure.com/openai/responses?api-version=2025-03-01-preview",
        ),
        ("https://res.openai.azure.com", "v1", "https://res.openai.azure.com/openai/v1/responses"),
        (
            "https://res.openai.azure.com/openai/v1",
            None,
            "https://res.openai.azure.com/openai/v1/responses",
        ),
        (
            "https://res.openai.azure.com",
            "preview",
            "https://res.openai.azure.com/openai/v1/responses?api-version=preview",
        ),
    ],
)
def test_azure_urls(base_url: str, api_version: str | None, url: str) -> None:
    config = provider("azure", base_url, api_version)
    request = AzureAdapter(config).build_request(call(config))
    assert request.url == url
    assert request.headers["api-key"] == "k-123"
    assert "Authorization" not in request.headers
    assert json.loads(request.body)["model"] == "gpt-5-deploy"  # the deployment


# --- the non-streaming answer ------------------------------------------------------------------


def unary_call(*, native: bool = False) -> UpstreamCall:
    client_body = {"model": "smart", "input": "hi"}
    return call(provider(), stream=False, native=client_body if native else None)


def unary_answer(scenario: str) -> bytes:
    return json.dumps(script(scenario).events[-1]["response"]).encode()


@pytest.mark.parametrize(
    ("scenario", "content", "finish", "calls"),
    [
        ("text", TEXT, "stop", []),
        ("parallel-2", None, "tool_calls", PARALLEL),
        ("text-then-call", TEXT, "tool_calls", ["get_weather"]),
        ("reasoning-then-call", None, "tool_calls", ["get_weather"]),
        ("incomplete", "".join(TEXT_PIECES[:2]), "length", []),
    ],
)
def test_unary_converted_to_chat_completion(
    scenario: str, content: str | None, finish: str, calls: list[str]
) -> None:
    result = OpenAIAdapter(provider()).unary_result(unary_call(), unary_answer(scenario))
    assert result.api == "chat"
    body = json.loads(result.body)
    assert body["object"] == "chat.completion"
    assert body["id"] == "resp_fake0123456789"
    choice = body["choices"][0]
    assert choice["message"]["content"] == content
    assert choice["finish_reason"] == finish
    made = choice["message"].get("tool_calls", [])
    assert [c["function"]["name"] for c in made] == calls
    assert [c["id"] for c in made] == [call_id(n) for n in calls]
    for c in made:
        assert json.loads(c["function"]["arguments"]) == EXPECTED_ARGS[c["function"]["name"]]
    if scenario == "reasoning-then-call":
        assert choice["message"]["reasoning_content"] == "".join(REASONING_PIECES)
    assert body["usage"]["prompt_tokens"] == USAGE["input_tokens"]
    assert body["usage"]["completion_tokens"] == USAGE["output_tokens"]
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 11
    assert result.usage is not None
    assert result.usage.total_tokens == USAGE["total_tokens"]
    assert result.model == "gpt-5-fake-2025-08-07"


def test_unary_for_a_responses_client_keeps_the_upstream_bytes() -> None:
    answer = unary_answer("parallel-2")
    result = OpenAIAdapter(provider()).unary_result(unary_call(native=True), answer)
    assert result.api == "responses"
    assert result.body is answer
    assert result.usage is not None
    assert result.usage.prompt_tokens == USAGE["input_tokens"]
    assert result.model == "gpt-5-fake-2025-08-07"


def test_unary_failed_response_is_an_error() -> None:
    with pytest.raises(UpstreamStreamError) as info:
        OpenAIAdapter(provider()).unary_result(unary_call(), unary_answer("failed"))
    assert info.value.retryable
    with pytest.raises(UpstreamProtocolError):
        OpenAIAdapter(provider()).unary_result(unary_call(), b"<html>")


def test_unary_for_a_responses_client_reads_only_the_head() -> None:
    # an output item of a shape the chat conversion does not know still passes through
    answer = json.dumps(
        {
            "id": "resp_1",
            "model": "gpt-5",
            "status": "completed",
            "output": [{"type": "future_item", "content": "a string", "summary": 3}],
            "usage": {"input_tokens": 3, "output_tokens": 4, "total_tokens": 7},
        }
    ).encode()
    result = OpenAIAdapter(provider()).unary_result(unary_call(native=True), answer)
    assert result.body is answer
    assert result.usage is not None
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (3, 4)
    with pytest.raises(UpstreamStreamError):
        OpenAIAdapter(provider()).unary_result(unary_call(native=True), unary_answer("failed"))
