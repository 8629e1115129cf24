"""anthropic-python through a running gateway in front of the fake Anthropic upstream: native
passthrough. The client's request reaches Anthropic as it was sent (thinking signatures,
documents, `anthropic-beta`) and Anthropic's events come back as they are; a failed native
attempt fails over to a translated (OpenAI) target."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams import anthropic_upstream
from tests.upstreams import openai_upstream
from tests.upstreams.anthropic_upstream import SIGNATURE
from tests.upstreams.anthropic_upstream import FakeAnthropic
from tests.upstreams.anthropic_upstream import scenario_events
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e

MASTER = "sk-gw-master-1"
RID = "req-native-1"
BETA = "interleaved-thinking-2025-05-14"
THINKING = {"type": "enabled", "budget_tokens": 1024}
TOOLS: list[Any] = [
    {"name": "get_weather", "description": "the weather", "input_schema": {"type": "object"}}
]
HI: list[Any] = [{"role": "user", "content": "hi"}]
OPENAI_TEXT = "".join(openai_upstream.TEXT_PIECES)
WEATHER_ARGS = anthropic_upstream.TOOL_ARGS[0][1]
FUTURE = {"a_field_from_the_future": {"x": ""}}  # top-level fields the translation ignores
Fakes = dict[str, Any]


@pytest.fixture(scope="module")
def fakes() -> Iterator[Fakes]:
    started = {"claude": FakeAnthropic().start(), "up": FakeOpenAI().start()}
    yield started
    for fake in started.values():
        fake.stop()


@pytest.fixture(scope="module")
def gw(fakes: Fakes, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
# the failures these tests provoke (and their retries) must not open the key's circuit
routing: {{circuit_failures: 1000}}
auth: {{master_key: {MASTER}}}
providers:
  - {{name: claude, kind: anthropic, base_url: "{fakes["claude"].base_url}",
      keys: [{{key: sk-ant-upstream}}]}}
  - {{name: up, kind: openai, base_url: "{fakes["up"].base_url}", keys: [{{key: sk-up}}]}}
models:
  - name: fallback
    targets:
      - {{provider: claude, model: fail-529, priority: 0}}
      - {{provider: up, model: text, priority: 1}}
  - name: emulated
    targets: [{{provider: claude, model: text}}]
    tools: emulate
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-messages-native"))
    yield gateway
    stop_gateway(gateway)


def client(gw: Gateway) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gw.url, api_key=MASTER, max_retries=0, timeout=20)


def streamed(
    gw: Gateway, model: str, messages: list[Any], **kwargs: Any
) -> anthropic.types.Message:
    with (
        client(gw) as c,
        c.messages.stream(
            model=model,
            max_tokens=2048,
            messages=messages,
            tools=TOOLS,
            extra_headers={"x-request-id": RID, "anthropic-beta": BETA},
            **kwargs,
        ) as stream,
    ):
        for _ in stream:
            pass
        return stream.get_final_message()


def post(gw: Gateway, body: dict[str, Any]) -> tuple[int, bytes, dict[str, str]]:
    request = urllib.request.Request(
        gw.url + "/v1/messages",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", "x-api-key": MASTER},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return response.status, response.read(), dict(response.headers)
    except urllib.error.HTTPError as err:
        with err:
            return err.code, err.read(), dict(err.headers)


def test_thinking_block_keeps_its_signature(gw: Gateway, fakes: Fakes) -> None:
    message = streamed(gw, "claude/thinking-tool", HI, thinking=THINKING)
    thinking, tool_use = message.content
    assert thinking.type == "thinking"
    assert thinking.thinking == "".join(anthropic_upstream.THINKING_PIECES)
    assert thinking.signature == SIGNATURE
    assert tool_use.type == "tool_use"
    assert (tool_use.id, tool_use.name, tool_use.input) == (
        "toolu_think_0",
        "get_weather",
        WEATHER_ARGS,
    )
    # the upstream's own message, not one the gateway made up
    assert message.id == "msg_fake"
    assert message.model == "claude-fake-1"
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == anthropic_upstream.USAGE_IN["input_tokens"]
    assert message.usage.output_tokens == anthropic_upstream.OUTPUT_TOKENS
    sent = fakes["claude"].requests[-1]
    assert sent.headers["anthropic-beta"] == BETA
    assert sent.headers["x-api-key"] == "sk-ant-upstream"
    assert sent.body == {
        "max_tokens": 2048,
        "messages": HI,
        "model": "thinking-tool",
        "tools": TOOLS,
        "thinking": THINKING,
        "stream": True,
    }


def test_the_assistant_turn_goes_back_unchanged(gw: Gateway, fakes: Fakes) -> None:
    first = streamed(gw, "claude/thinking-tool", HI, thinking=THINKING)
    history: list[Any] = [
        *HI,
        {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": first.content[1].id,  # type: ignore[union-attr]
                    "content": "18C and sunny",
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    answer = streamed(gw, "claude/text", history, thinking=THINKING)
    assert [b.type for b in answer.content] == ["text"]
    sent = fakes["claude"].requests[-1]
    assert sent.body["messages"] == history
    assert sent.body["messages"][1]["content"][0] == {
        "type": "thinking",
        "thinking": "".join(anthropic_upstream.THINKING_PIECES),
        "signature": SIGNATURE,
    }
    assert SIGNATURE.encode() in sent.raw


def test_the_stream_is_the_upstream_stream(gw: Gateway) -> None:
    body = {"model": "claude/thinking-tool", "max_tokens": 2048, "stream": True, "messages": HI}
    status, raw, headers = post(gw, body)
    assert status == 200
    assert raw == b"".join(scenario_events("thinking-tool", "claude-fake-1"))
    assert headers["x-gateway-provider"] == "claude"
    assert headers["x-gateway-model"] == "thinking-tool"


def test_create_without_streaming_returns_the_upstream_message(gw: Gateway, fakes: Fakes) -> None:
    body = {"model": "claude/thinking-tool", "max_tokens": 2048, "messages": HI}
    status, raw, _ = post(gw, body)
    assert status == 200
    assert json.loads(raw) == fakes["claude"]._message("thinking-tool")
    assert fakes["claude"].requests[-1].body == {**body, "model": "thinking-tool", "stream": False}
    with client(gw) as c:
        message = c.messages.create(model="claude/thinking-tool", max_tokens=2048, messages=HI)
    assert message.content[0].type == "thinking"
    assert message.content[0].signature == SIGNATURE
    assert message.id == "msg_fake_unary"


def test_a_document_block_reaches_anthropic(gw: Gateway, fakes: Fakes) -> None:
    """The translation cannot carry a document; a model served only by Anthropic does not
    need it to."""
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "the doc"},
        "citations": {"enabled": True},
    }
    messages = [{"role": "user", "content": [document, {"type": "text", "text": "sum up"}]}]
    message = streamed(gw, "claude/text", messages)
    assert message.content[0].type == "text"
    assert fakes["claude"].requests[-1].body["messages"] == messages


def test_a_document_for_a_model_with_a_translated_target_is_refused(gw: Gateway) -> None:
    document = {
        "type": "document",
        "source": {"type": "text", "media_type": "text/plain", "data": "d"},
    }
    body = {
        "model": "fallback",
        "max_tokens": 10,
        "messages": [{"role": "user", "content": [document]}],
    }
    status, raw, _ = post(gw, body)
    assert status == 400
    error = json.loads(raw)["error"]
    assert error["type"] == "invalid_request_error"
    assert "messages[0].content[0].type" in error["message"]


@pytest.mark.parametrize("stream", [True, False])
def test_failover_from_a_native_attempt_to_a_translated_one(
    gw: Gateway, fakes: Fakes, stream: bool
) -> None:
    before = len(fakes["claude"].requests)
    with client(gw) as c:
        if stream:
            with c.messages.stream(
                model="fallback",
                max_tokens=300,
                messages=HI,
                extra_headers={"x-request-id": RID},
                extra_body=FUTURE,
            ) as events:
                kinds = [e.type for e in events]
                message = events.get_final_message()
            assert kinds.count("message_start") == 1
            assert kinds[-1] == "message_stop"
        else:
            raw = c.messages.with_raw_response.create(
                model="fallback",
                max_tokens=300,
                messages=HI,
                extra_headers={"x-request-id": RID},
                extra_body=FUTURE,
            )
            # the 529 tried once more on its target (routing.retries_per_target), then failover
            assert raw.headers["x-gateway-attempts"] == "3"
            message = raw.parse()
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", OPENAI_TEXT)]
    # the gateway's own message: the translated answer of the OpenAI target
    assert message.id == f"msg_{RID}"
    assert message.model == "fallback"
    native = fakes["claude"].requests[before:]
    # the Anthropic attempt was the native one: a field the translation drops was there
    assert [r.body for r in native] == [
        {"model": "fail-529", "max_tokens": 300, "messages": HI, **FUTURE, "stream": stream}
    ] * 2
    sent = fakes["up"].requests[-1].body
    assert sent["model"] == "text"
    assert sent["messages"] == [{"role": "user", "content": "hi"}]


def test_upstream_error_after_the_commit_is_forwarded_once(gw: Gateway) -> None:
    body = {"model": "claude/error-after", "max_tokens": 10, "stream": True, "messages": HI}
    status, raw, _ = post(gw, body)
    assert status == 200
    events = scenario_events("error-after", "claude-fake-1")[:5]
    assert raw.startswith(b"".join(events))
    rest = raw.removeprefix(b"".join(events))
    assert rest.count(b"event: error") == 1
    name, data = rest.decode().rstrip("\n").split("\n")
    assert name == "event: error"
    assert json.loads(data.removeprefix("data: "))["error"]["type"] == "overloaded_error"


def test_a_model_with_emulated_tools_is_always_translated(gw: Gateway, fakes: Fakes) -> None:
    message = streamed(gw, "emulated", HI, extra_body=FUTURE)
    assert [b.type for b in message.content] == ["text"]
    assert message.id == f"msg_{RID}"
    assert message.model == "emulated"
    sent = fakes["claude"].requests[-1]
    assert "tools" not in sent.body  # described in the prompt instead
    assert "a_field_from_the_future" not in sent.body
    assert "anthropic-beta" not in sent.headers
