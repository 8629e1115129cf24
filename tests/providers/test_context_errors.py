"""Each provider's context-length error is recognised as one (context-window fallbacks move
it to a larger model); other 400s of the same providers are not. The bodies are the
providers' own wordings, as their APIs send them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from gateway.config import parse_config
from gateway.providers.registry import make_adapter

PROVIDERS = """
providers:
  - {name: openai, kind: openai, keys: [{key: k}]}
  - {name: vllm, kind: openai, base_url: "http://127.0.0.1:9/v1", keys: [{key: k}]}
  - name: azure
    kind: azure
    base_url: "https://x.openai.azure.com"
    api_version: "2024-10-21"
    keys: [{key: k}]
  - {name: anthropic, kind: anthropic, keys: [{key: k}]}
  - {name: gemini, kind: gemini, keys: [{key: k}]}
  - name: bedrock
    kind: bedrock
    region: us-east-1
    keys: [{aws_access_key_id: a, aws_secret_access_key: s}]
  - {name: ollama, kind: ollama, base_url: "http://127.0.0.1:9"}
models: []
"""


def adapters() -> dict[str, Any]:
    config = parse_config(PROVIDERS, env={})
    return {p.name: make_adapter(p) for p in config.providers}


OPENAI_TOO_LONG = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens. However, your "
        "messages resulted in 130000 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
CASES = [
    ("openai", 400, OPENAI_TOO_LONG, True),
    ("azure", 400, OPENAI_TOO_LONG, True),
    (
        "vllm",  # an OpenAI-compatible server: the wording, no code
        400,
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you "
            "requested 5000 tokens (4000 in the messages, 1000 in the completion).",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
        True,
    ),
    (
        "anthropic",
        400,
        {
            "type": "error",
            "error": {
                "type": "invalid_request_error",
                "message": "prompt is too long: 210000 tokens > 200000 maximum",
            },
        },
        True,
    ),
    (
        "gemini",
        400,
        {
            "error": {
                "code": 400,
                "message": "The input token count (1200293) exceeds the maximum number of "
                "tokens allowed (1048576).",
                "status": "INVALID_ARGUMENT",
            }
        },
        True,
    ),
    ("bedrock", 400, {"message": "Input is too long for requested model."}, True),
    (
        "bedrock",
        400,
        {
            "message": "The model returned the following errors: prompt is too long: "
            "200049 tokens > 200000 maximum"
        },
        True,
    ),
    ("openai", 400, {"error": {"message": "Invalid value for 'temperature'", "code": None}}, False),
    (
        "openai",
        400,
        {"error": {"message": "rejected by our safety system", "code": "content_policy_violation"}},
        False,
    ),
    (
        "anthropic",
        400,
        {
            "type": "error",
            "error": {"type": "invalid_request_error", "message": "max_tokens: 10000 > 4096"},
        },
        False,
    ),
    ("bedrock", 400, {"message": "Malformed input request"}, False),
    (
        "gemini",
        500,
        {"error": {"code": 500, "message": "exceeds the maximum number of tokens"}},
        False,
    ),
]


@pytest.mark.parametrize(("name", "status", "body", "exceeded"), CASES)
def test_context_length_errors_are_recognised(
    name: str, status: int, body: dict[str, Any], exceeded: bool
) -> None:
    headers = (
        {"x-amzn-errortype": "ValidationException:http://internal"} if name == "bedrock" else {}
    )
    err = adapters()[name].error_from_response(status, json.dumps(body).encode(), headers)
    assert err.context_exceeded is exceeded
    assert not err.retryable or status >= 500  # a 400 is still not failed over as such
