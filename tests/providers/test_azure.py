"""Azure OpenAI adapter: the URL for each path style, api-version, the `api-key` header,
the body's model, the passthrough of Azure's content-filter chunks, and error mapping."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest

from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.errors import UpstreamStatusError
from gateway.framing.sse import SSEEvent
from gateway.providers.azure.adapter import AzureAdapter
from gateway.providers.base import UpstreamCall
from gateway.providers.registry import make_adapter
from gateway.providers.registry import provider_config
from gateway.stream.accumulator import StreamAccumulator
from gateway.upstream.outcome import final_error
from gateway.wire.openai_chat import ChatRequest

KEY = "az-key-0123456789"
RESOURCE = "https://res.openai.azure.com"
BODY: dict[str, Any] = {
    "model": "smart",
    "messages": [{"role": "user", "content": "hi"}],
    "temperature": 0.2,
    "vendor_field": {"x": [1, None, ""]},
}


def provider(base_url: str = RESOURCE, api_version: str | None = "2024-10-21") -> ProviderConfig:
    return provider_config(
        name="az",
        kind="azure",
        base_url=base_url,
        api_version=api_version,
        keys=[ProviderKey(key=Secret(KEY))],
    )


def call(
    config: ProviderConfig, *, model: str = "gpt-4o-deploy", stream: bool = False
) -> UpstreamCall:
    body = {**BODY, "stream": True} if stream else dict(BODY)
    return UpstreamCall(
        request=msgspec.convert(body, ChatRequest),
        body=body,
        provider=config,
        key=config.keys[0] if config.keys else None,
        model=model,
        stream=stream,
        request_id="req-1",
    )


def test_registry_makes_an_azure_adapter() -> None:
    adapter = make_adapter(provider())
    assert isinstance(adapter, AzureAdapter)
    assert adapter.framing == "sse"
    assert adapter.native_unary
    assert adapter.token_source(provider().keys[0]) is None


@pytest.mark.parametrize(
    ("base_url", "version", "model", "url"),
    [
        (
            RESOURCE,
            "2024-10-21",
            "gpt-4o-deploy",
            RESOURCE + "/openai/deployments/gpt-4o-deploy/chat/completions?api-version=2024-10-21",
        ),
        (
            RESOURCE + "/",
            "2025-04-01-preview",
            "my deploy/v2",
            RESOURCE + "/openai/deployments/my%20deploy%2Fv2/chat/completions"
            "?api-version=2025-04-01-preview",
        ),
        (
            RESOURCE + "/openai/",
            "2024-10-21",
            "d",
            RESOURCE + "/openai/deployments/d/chat/completions?api-version=2024-10-21",
        ),
        (RESOURCE, "v1", "gpt-4o", RESOURCE + "/openai/v1/chat/completions"),
        (RESOURCE, "V1", "gpt-4o", RESOURCE + "/openai/v1/chat/completions"),
        (RESOURCE + "/openai", "v1", "gpt-4o", RESOURCE + "/openai/v1/chat/completions"),
        (RESOURCE + "/openai/v1/", "v1", "gpt-4o", RESOURCE + "/openai/v1/chat/completions"),
        (
            RESOURCE,
            "preview",
            "gpt-4o",
            RESOURCE + "/openai/v1/chat/completions?api-version=preview",
        ),
        (
            RESOURCE + "/openai/v1",
            "preview",
            "gpt-4o",
            RESOURCE + "/openai/v1/chat/completions?api-version=preview",
        ),
        # a base_url already on the v1 API wins over a dated version, which v1 does not take
        (RESOURCE + "/openai/v1", "2024-10-21", "gpt-4o", RESOURCE + "/openai/v1/chat/completions"),
    ],
)
def test_url(base_url: str, version: str, model: str, url: str) -> None:
    adapter = AzureAdapter(provider(base_url, version))
    assert adapter.build_request(call(provider(), model=model)).url == url


@pytest.mark.parametrize("version", ["2024-10-21", "v1"])
@pytest.mark.parametrize("stream", [False, True])
def test_api_key_header_and_no_authorization(version: str, stream: bool) -> None:
    config = provider(api_version=version)
    req = AzureAdapter(config).build_request(call(config, stream=stream))
    assert req.method == "POST"
    assert req.headers["api-key"] == KEY
    assert "Authorization" not in req.headers
    assert req.headers["Content-Type"] == "application/json"
    assert ("Accept" in req.headers) is stream


def test_no_key_no_header() -> None:
    config = provider_config(name="az", kind="azure", base_url=RESOURCE, api_version="v1")
    req = AzureAdapter(config).build_request(call(config))
    assert "api-key" not in req.headers
    assert "Authorization" not in req.headers


@pytest.mark.parametrize("version", ["2024-10-21", "v1"])
def test_body_is_the_client_body_with_the_upstream_model(version: str) -> None:
    config = provider(api_version=version)
    sent = json.loads(AzureAdapter(config).build_request(call(config, model="dep-1")).body)
    assert sent == {**BODY, "model": "dep-1"}


def test_stream_body_asks_for_usage() -> None:
    config = provider()
    sent = json.loads(AzureAdapter(config).build_request(call(config, stream=True)).body)
    assert sent["stream"] is True
    assert sent["stream_options"] == {"include_usage": True}
    assert sent["model"] == "gpt-4o-deploy"


# --- Azure's stream: content-filter annotations pass through ------------------------------

FILTERS = {
    "hate": {"filtered": False, "severity": "safe"},
    "self_harm": {"filtered": False, "severity": "safe"},
    "sexual": {"filtered": False, "severity": "safe"},
    "violence": {"filtered": False, "severity": "safe"},
}
PROMPT_FILTER = {
    "choices": [],
    "created": 0,
    "id": "",
    "model": "",
    "object": "",
    "prompt_filter_results": [{"prompt_index": 0, "content_filter_results": FILTERS}],
}


def chunk(choice: dict[str, Any] | None, **extra: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-az",
        "object": "chat.completion.chunk",
        "created": 1754693439,
        "model": "gpt-4o-2024-11-20",
        "system_fingerprint": "fp_az",
        "choices": [] if choice is None else [choice],
        **extra,
    }


def test_content_filter_chunks_are_passed_through_unchanged() -> None:
    config = provider()
    translator = AzureAdapter(config).translator(call(config, stream=True))
    acc = StreamAccumulator()
    frames = [
        PROMPT_FILTER,
        chunk(
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
                "logprobs": None,
                "content_filter_results": {},
            }
        ),
        chunk(
            {
                "index": 0,
                "delta": {"content": "Hi"},
                "finish_reason": None,
                "logprobs": None,
                "content_filter_results": FILTERS,
            }
        ),
        chunk(
            {
                "index": 0,
                "delta": {},
                "finish_reason": "content_filter",
                "logprobs": None,
                "content_filter_results": {"sexual": {"filtered": True, "severity": "high"}},
            }
        ),
    ]
    for frame in frames:
        data = json.dumps(frame).encode()
        (item,) = translator.feed(SSEEvent(data=data))
        assert item.raw == data  # the client gets Azure's own bytes, extra fields included
        assert acc.add(item.chunk) is item.chunk  # nothing to fix: sent on as is
    assert translator.feed(SSEEvent(data=b"[DONE]")) == []
    assert translator.done
    assert acc.id == "chatcmpl-az"  # the prompt-filter chunk's empty id is not the stream's
    assert acc.unfinished_choices() == []
    assert acc.choices[0].finish_reason == "content_filter"


# --- errors ------------------------------------------------------------------------------------

CONTENT_FILTER_ERROR = {
    "error": {
        "message": "The response was filtered due to the prompt triggering Azure OpenAI's "
        "content management policy.",
        "type": None,
        "param": "prompt",
        "code": "content_filter",
        "status": 400,
        "innererror": {
            "code": "ResponsibleAIPolicyViolation",
            "content_filter_result": {"hate": {"filtered": True, "severity": "high"}},
        },
    }
}


def test_content_filter_error_is_the_clients_400() -> None:
    err = AzureAdapter(provider()).error_from_response(
        400, json.dumps(CONTENT_FILTER_ERROR).encode(), {}
    )
    assert isinstance(err, UpstreamStatusError)
    assert not err.retryable
    assert err.upstream_status == 400
    assert err.code == "content_filter"
    assert err.param == "prompt"
    assert err.type == "invalid_request_error"
    assert "content management policy" in err.message
    final = final_error([err])
    assert (final.status, final.code) == (400, "content_filter")


def test_typed_client_error_keeps_its_type() -> None:
    body = {"error": {"message": "bad", "type": "invalid_request_error", "code": "x"}}
    err = AzureAdapter(provider()).error_from_response(422, json.dumps(body).encode(), {})
    assert (err.type, err.code, err.retryable) == ("invalid_request_error", "x", False)


@pytest.mark.parametrize("status", [401, 429, 500])
def test_retryable_statuses_stay_retryable(status: int) -> None:
    body = {"error": {"code": str(status), "message": "Access denied due to invalid key az-k"}}
    err = AzureAdapter(provider()).error_from_response(status, json.dumps(body).encode(), {})
    assert err.retryable
    assert err.type == "upstream_error"
    if status == 401:
        assert "az-k" not in err.message


def test_deployment_not_found_is_a_404_for_the_client() -> None:
    body = {"error": {"code": "DeploymentNotFound", "message": "The API deployment ..."}}
    err = AzureAdapter(provider()).error_from_response(404, json.dumps(body).encode(), {})
    final = final_error([err])
    assert (final.status, final.code) == (404, "DeploymentNotFound")
    assert final.type == "invalid_request_error"


def test_non_json_error_keeps_an_excerpt() -> None:
    err = AzureAdapter(provider()).error_from_response(400, b"<html>Bad Request</html>", {})
    assert "Bad Request" in err.message
    assert err.upstream_status == 400
