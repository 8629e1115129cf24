"""Real clients through a running gateway to a fake Bedrock runtime (provider kind
`bedrock`): tool calls, text, usage, errors, and the signed request the upstream saw."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

import openai
import pytest

from gateway.providers.bedrock.sigv4 import sign
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.bedrock_upstream import TEXT_PIECES
from tests.upstreams.bedrock_upstream import TOOL_ARGS
from tests.upstreams.bedrock_upstream import USAGE
from tests.upstreams.bedrock_upstream import FakeBedrock

pytestmark = pytest.mark.e2e

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name, _ in TOOL_ARGS
]
CHAT: list[Any] = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeBedrock]:
    upstream = FakeBedrock().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeBedrock, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
providers:
  - name: br
    kind: bedrock
    region: us-east-1
    base_url: {fake.base_url}
    keys: [{{aws_access_key_id: AKIDEXAMPLE, aws_secret_access_key: secret}}]
    timeouts: {{first_byte_s: 5, idle_s: 5}}
  - name: brkey
    kind: bedrock
    region: us-east-1
    base_url: {fake.base_url}
    keys: [{{key: bedrock-api-key}}]
"""
    gateway = start_gateway(config, Path(tmp_path_factory.mktemp("gw-bedrock")))
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def oai(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20) as c:
        yield c


def test_stream_two_tools_after_text(oai: openai.OpenAI, fake: FakeBedrock) -> None:
    with oai.chat.completions.stream(
        model="br/two-tools:0", messages=CHAT, tools=TOOLS, max_tokens=200
    ) as stream:
        indexes = {
            tc.index
            for event in stream
            if event.type == "chunk" and event.chunk.choices
            for tc in event.chunk.choices[0].delta.tool_calls or []
        }
        final = stream.get_final_completion()
    assert indexes == {0, 1}
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "".join(TEXT_PIECES)
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == [name for name, _ in TOOL_ARGS]
    assert [c.function.arguments for c in calls] == [json.dumps(args) for _, args in TOOL_ARGS]
    assert [c.id for c in calls] == ["tooluse_fake_0", "tooluse_fake_1"]
    seen = fake.requests[-1]
    assert seen.path == "/model/two-tools%3A0/converse-stream"
    auth = seen.headers["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/")
    assert "/us-east-1/bedrock/aws4_request, SignedHeaders=" in auth
    # the signature is valid for what arrived: re-sign the received request
    names = auth.split("SignedHeaders=", 1)[1].split(",", 1)[0].split(";")
    now = datetime.strptime(seen.headers["x-amz-date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    again = sign(
        "POST",
        f"http://{seen.headers['host']}{seen.path}",
        {n: seen.headers[n] for n in names if n != "host"},
        seen.raw,
        access_key="AKIDEXAMPLE",
        secret_key="secret",
        session_token=None,
        region="us-east-1",
        now=now,
    )
    assert again["authorization"] == auth
    assert seen.body["inferenceConfig"] == {"maxTokens": 200}
    assert [t["toolSpec"]["name"] for t in seen.body["toolConfig"]["tools"]] == [
        name for name, _ in TOOL_ARGS
    ]


def test_stream_text_and_usage(oai: openai.OpenAI) -> None:
    with oai.chat.completions.stream(
        model="br/text",
        messages=[{"role": "system", "content": "be brief"}, *CHAT],
        stream_options={"include_usage": True},
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "".join(TEXT_PIECES)
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None
    assert final.usage.prompt_tokens == USAGE["inputTokens"]
    assert final.usage.completion_tokens == USAGE["outputTokens"]
    assert final.usage.total_tokens == USAGE["totalTokens"]


def test_non_streaming_with_api_key(oai: openai.OpenAI, fake: FakeBedrock) -> None:
    completion = oai.chat.completions.create(model="brkey/two-tools", messages=CHAT, tools=TOOLS)
    choice = completion.choices[0]
    assert choice.message.content == "".join(TEXT_PIECES)
    calls = choice.message.tool_calls or []
    assert [json.loads(c.function.arguments) for c in calls] == [args for _, args in TOOL_ARGS]
    assert choice.finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.total_tokens == USAGE["totalTokens"]
    seen = fake.requests[-1]
    assert seen.path == "/model/two-tools/converse"
    assert seen.headers["authorization"] == "Bearer bedrock-api-key"


def test_exception_mid_stream_is_an_api_error(oai: openai.OpenAI) -> None:
    with (
        pytest.raises(openai.APIError),
        oai.chat.completions.create(model="br/exception", messages=CHAT, stream=True) as stream,
    ):
        for _ in stream:
            pass


@pytest.mark.parametrize("stream", [False, True])
def test_throttling_is_a_rate_limit_error(oai: openai.OpenAI, stream: bool) -> None:
    with pytest.raises(openai.RateLimitError):
        oai.chat.completions.create(model="brkey/fail-429", messages=CHAT, stream=stream)  # type: ignore[call-overload]
