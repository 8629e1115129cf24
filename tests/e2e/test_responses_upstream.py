"""openai-python's chat client through a running gateway whose targets call the upstream
Responses API (`api: responses`), in front of the fake Responses upstream: text, interleaved
parallel calls, text then a call, usage, non-streaming answers, failover on a failed
response, an error after the commit point, and an Azure `api: responses` target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_responses_upstream import PARALLEL
from tests.upstreams.openai_responses_upstream import TEXT
from tests.upstreams.openai_responses_upstream import USAGE
from tests.upstreams.openai_responses_upstream import FakeResponses
from tests.upstreams.openai_responses_upstream import call_id
from tests.upstreams.openai_upstream import EXPECTED_ARGS
from tests.upstreams.openai_upstream import TEXT_PIECES

pytestmark = pytest.mark.e2e

KEY = "sk-upstream-responses"
AZ_KEY = "az-key-responses"
HI: list[Any] = [{"role": "user", "content": "hi"}]
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
    }
    for name in EXPECTED_ARGS
]
SCENARIOS = ["text", "parallel-2", "text-then-call", "reasoning-then-call", "failed"]
SCENARIOS += ["incomplete", "error-after"]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeResponses]:
    upstream = FakeResponses(azure_key=AZ_KEY).start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeResponses, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    models = "".join(
        f"  - {{name: {s}, targets: [{{provider: up, model: {s}, api: responses}}]}}\n"
        for s in SCENARIOS
    )
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
providers:
  - name: up
    kind: openai
    base_url: {fake.base_url}
    keys: [{{key: {KEY}}}]
    timeouts: {{first_byte_s: 5, idle_s: 5}}
  - name: az
    kind: azure
    base_url: {fake.root_url}
    api_version: "2025-04-01-preview"
    keys: [{{key: {AZ_KEY}}}]
  - name: azv1
    kind: azure
    base_url: {fake.root_url}/openai/v1
    api_version: v1
    keys: [{{key: {AZ_KEY}}}]
models:
{models}  - name: failover
    targets:
      - {{provider: up, model: failed, api: responses, priority: 0}}
      - {{provider: up, model: text, api: responses, priority: 1}}
  - name: az-text
    targets: [{{provider: az, model: text, api: responses}}]
  - name: azv1-text
    targets: [{{provider: azv1, model: text, api: responses}}]
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-responses"))
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def oai(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20) as c:
        yield c


def final(oai: openai.OpenAI, model: str, **extra: Any) -> Any:
    with oai.chat.completions.stream(model=model, messages=HI, **extra) as stream:
        chunks = [event.chunk for event in stream if event.type == "chunk"]
        return stream.get_final_completion(), chunks


def test_text(oai: openai.OpenAI, fake: FakeResponses) -> None:
    completion, chunks = final(oai, "text")
    assert completion.choices[0].message.content == TEXT
    assert completion.choices[0].finish_reason == "stop"
    assert all(c.usage is None for c in chunks)  # not asked for: not shown
    sent = fake.calls[-1]
    assert sent.path == "/v1/responses"
    assert sent.headers["Authorization"] == f"Bearer {KEY}"
    assert sent.body["model"] == "text"
    assert sent.body["stream"] is True
    assert sent.body["store"] is False
    assert sent.body["input"] == [{"type": "message", "role": "user", "content": "hi"}]


def test_parallel_calls(oai: openai.OpenAI) -> None:
    completion, chunks = final(oai, "parallel-2", tools=TOOLS)
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert [c.function.name for c in calls] == PARALLEL
    assert [json.loads(c.function.arguments) for c in calls] == [EXPECTED_ARGS[n] for n in PARALLEL]
    assert [c.id for c in calls] == [call_id(n) for n in PARALLEL]
    indexes = {
        tc.index: tc.id
        for ch in chunks
        for c in ch.choices
        for tc in c.delta.tool_calls or []
        if tc.id
    }
    assert indexes == {0: call_id(PARALLEL[0]), 1: call_id(PARALLEL[1])}
    # the deltas really interleaved on the way: index 0, 1, 0, ... in the chunks
    order = [tc.index for ch in chunks for c in ch.choices for tc in c.delta.tool_calls or []]
    assert order[:4] == [0, 1, 0, 1]


def test_text_then_call(oai: openai.OpenAI) -> None:
    completion, chunks = final(oai, "text-then-call", tools=TOOLS)
    message = completion.choices[0].message
    assert message.content == TEXT
    assert completion.choices[0].finish_reason == "tool_calls"
    calls = message.tool_calls or []
    assert len(calls) == 1
    assert calls[0].id == call_id("get_weather")
    assert json.loads(calls[0].function.arguments) == EXPECTED_ARGS["get_weather"]
    indexes = {tc.index for ch in chunks for c in ch.choices for tc in c.delta.tool_calls or []}
    assert indexes == {0}  # the message item before it does not shift the index


def test_usage_when_asked(oai: openai.OpenAI) -> None:
    completion, chunks = final(oai, "text", stream_options={"include_usage": True})
    assert chunks[-1].choices == []
    usage = chunks[-1].usage
    assert usage is not None
    assert usage.prompt_tokens == USAGE["input_tokens"]
    assert usage.completion_tokens == USAGE["output_tokens"]
    assert usage.total_tokens == USAGE["total_tokens"]
    assert usage.prompt_tokens_details is not None
    assert usage.prompt_tokens_details.cached_tokens == 11
    assert usage.completion_tokens_details is not None
    assert usage.completion_tokens_details.reasoning_tokens == 26
    assert completion.usage is not None


@pytest.mark.parametrize(
    ("model", "content", "finish", "calls"),
    [
        ("text", TEXT, "stop", []),
        ("parallel-2", None, "tool_calls", PARALLEL),
        ("text-then-call", TEXT, "tool_calls", ["get_weather"]),
        ("reasoning-then-call", None, "tool_calls", ["get_weather"]),
        ("incomplete", "".join(TEXT_PIECES[:2]), "length", []),
    ],
)
def test_non_streaming(
    oai: openai.OpenAI,
    fake: FakeResponses,
    model: str,
    content: str | None,
    finish: str,
    calls: list[str],
) -> None:
    result = oai.chat.completions.create(model=model, messages=HI, tools=TOOLS)
    choice = result.choices[0]
    assert choice.message.content == content
    assert choice.finish_reason == finish
    assert [c.function.name for c in choice.message.tool_calls or []] == calls
    for c in choice.message.tool_calls or []:
        assert json.loads(c.function.arguments) == EXPECTED_ARGS[c.function.name]
    assert result.usage is not None
    assert result.usage.total_tokens == USAGE["total_tokens"]
    assert "stream" in fake.calls[-1].body
    assert fake.calls[-1].body["stream"] is False


def test_incomplete_stream_finishes_with_length(oai: openai.OpenAI) -> None:
    # the helper raises on `length`, carrying the completion it accumulated
    with pytest.raises(openai.LengthFinishReasonError) as info:
        final(oai, "incomplete")
    completion = info.value.completion
    assert completion.choices[0].message.content == "".join(TEXT_PIECES[:2])
    assert completion.choices[0].finish_reason == "length"


def test_failed_response_fails_over(oai: openai.OpenAI, fake: FakeResponses) -> None:
    before = len(fake.calls)
    raw = oai.chat.completions.with_raw_response.create(model="failover", messages=HI)
    # a server_error is tried once more on its target (routing.retries_per_target), then failover
    assert raw.headers["x-gateway-attempts"] == "3"
    assert raw.parse().choices[0].message.content == TEXT
    completion, _ = final(oai, "failover")
    assert completion.choices[0].message.content == TEXT
    assert [c.body["model"] for c in fake.calls[before:]] == ["failed", "failed", "text"] * 2


def test_failed_response_alone_is_a_502(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.APIStatusError) as info:
        final(oai, "failed")
    assert info.value.status_code == 502


def read_content(oai: openai.OpenAI, model: str, seen: list[str]) -> None:
    """Stream `model`, collecting its content deltas (until an error raises)."""
    with oai.chat.completions.stream(model=model, messages=HI) as stream:
        seen.extend(event.delta for event in stream if event.type == "content.delta")


def test_error_after_text_reaches_the_client(oai: openai.OpenAI) -> None:
    seen: list[str] = []
    with pytest.raises(openai.APIError) as info:
        read_content(oai, "error-after", seen)
    assert not isinstance(info.value, openai.APIStatusError)  # an event in a 200 stream
    assert "".join(seen) == "".join(TEXT_PIECES[:3])
    assert "The server had an error." in info.value.message


@pytest.mark.parametrize("stream", [False, True])
def test_azure_deployment_path(oai: openai.OpenAI, fake: FakeResponses, stream: bool) -> None:
    if stream:
        completion, _ = final(oai, "az-text")
    else:
        completion = oai.chat.completions.create(model="az-text", messages=HI)
    assert completion.choices[0].message.content == TEXT
    sent = fake.calls[-1]
    assert sent.path == "/openai/responses"
    assert sent.query == {"api-version": "2025-04-01-preview"}
    assert sent.headers["api-key"] == AZ_KEY
    assert "Authorization" not in sent.headers
    assert sent.body["model"] == "text"
    assert sent.body["store"] is False


def test_azure_v1_path(oai: openai.OpenAI, fake: FakeResponses) -> None:
    completion, _ = final(oai, "azv1-text")
    assert completion.choices[0].message.content == TEXT
    sent = fake.calls[-1]
    assert sent.path == "/openai/v1/responses"
    assert sent.query == {}
    assert sent.headers["api-key"] == AZ_KEY
    assert "Authorization" not in sent.headers


def test_anthropic_messages_client_through_a_responses_target(gw: Gateway) -> None:
    """Another inbound API over the same target: the Messages client gets the exact calls
    (argument deltas interleaved upstream, routed by item_id) as tool_use blocks."""
    tools: list[Any] = [
        {"name": name, "input_schema": {"type": "object", "properties": {}}}
        for name in EXPECTED_ARGS
    ]
    with anthropic.Anthropic(base_url=gw.url, api_key="k", max_retries=0) as client:
        with client.messages.stream(
            model="parallel-2", max_tokens=200, messages=HI, tools=tools
        ) as stream:
            message = stream.get_final_message()
        uses = [b for b in message.content if b.type == "tool_use"]
        assert [(u.id, u.name, u.input) for u in uses] == [
            (call_id(name), name, EXPECTED_ARGS[name]) for name in PARALLEL
        ]
        assert message.stop_reason == "tool_use"
        assert message.usage.output_tokens == USAGE["output_tokens"]
        with client.messages.stream(
            model="text-then-call", max_tokens=200, messages=HI, tools=tools
        ) as stream:
            message = stream.get_final_message()
        assert [b.type for b in message.content] == ["text", "tool_use"]
        assert message.content[0].text == TEXT  # type: ignore[union-attr]
