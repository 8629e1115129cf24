"""Real clients through a running gateway to a fake Anthropic upstream (provider kind
`anthropic`): calls, arguments, text, usage, errors, and the request the upstream saw."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.e2e.test_errors import error_of
from tests.e2e.test_errors import post
from tests.upstreams.anthropic_upstream import OUTPUT_TOKENS
from tests.upstreams.anthropic_upstream import TEXT_PIECES
from tests.upstreams.anthropic_upstream import TOOL_ARGS
from tests.upstreams.anthropic_upstream import USAGE_IN
from tests.upstreams.anthropic_upstream import FakeAnthropic

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
PROMPT_TOKENS = sum(USAGE_IN.values())


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    upstream = FakeAnthropic().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeAnthropic, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
# the failures these tests provoke (and their retries) must not open the key's circuit
routing: {{circuit_failures: 1000}}
providers:
  - name: claude
    kind: anthropic
    base_url: {fake.base_url}
    keys: [{{key: sk-ant-test}}]
    timeouts: {{first_byte_s: 5, idle_s: 5}}
"""
    gateway = start_gateway(config, Path(tmp_path_factory.mktemp("gw-anthropic")))
    yield gateway
    stop_gateway(gateway)


@pytest.fixture
def oai(gw: Gateway) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20) as c:
        yield c


def test_openai_stream_text_and_usage(oai: openai.OpenAI, fake: FakeAnthropic) -> None:
    with oai.chat.completions.stream(
        model="claude/text",
        messages=[{"role": "system", "content": "be brief"}, *CHAT],
        stream_options={"include_usage": True},
        max_tokens=300,
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "".join(TEXT_PIECES)
    assert final.choices[0].finish_reason == "stop"
    assert final.usage is not None
    assert final.usage.prompt_tokens == PROMPT_TOKENS
    assert final.usage.completion_tokens == OUTPUT_TOKENS
    assert final.usage.prompt_tokens_details is not None
    assert final.usage.prompt_tokens_details.cached_tokens == USAGE_IN["cache_read_input_tokens"]
    seen = fake.requests[-1]
    assert seen.headers["x-api-key"] == "sk-ant-test"
    assert seen.headers["anthropic-version"] == "2023-06-01"
    assert seen.body == {
        "model": "text",
        "max_tokens": 300,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
        "system": [{"type": "text", "text": "be brief"}],
        "stream": True,
    }


def test_openai_stream_two_tools_after_text(oai: openai.OpenAI, fake: FakeAnthropic) -> None:
    finishes = []
    with oai.chat.completions.stream(
        model="claude/two-tools", messages=CHAT, tools=TOOLS, parallel_tool_calls=False
    ) as stream:
        for ev in stream:
            if ev.type == "chunk":
                finishes += [c.finish_reason for c in ev.chunk.choices if c.finish_reason]
                assert ev.chunk.usage is None  # not asked for: not shown
        final = stream.get_final_completion()
    message = final.choices[0].message
    assert message.content == "".join(TEXT_PIECES)
    calls = message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == TOOL_ARGS
    assert [c.id for c in calls] == ["toolu_fake_0", "toolu_fake_1"]
    assert finishes == ["tool_calls"]
    body = fake.requests[-1].body
    assert body["tools"][0] == {
        "name": "get_weather",
        "description": "the get_weather tool",
        "input_schema": {"type": "object", "properties": {}},
    }
    assert body["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}


def test_no_args_tool_and_server_tool(oai: openai.OpenAI) -> None:
    with oai.chat.completions.stream(model="claude/no-args", messages=CHAT, tools=TOOLS) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in calls] == [("now", "{}")]
    with oai.chat.completions.stream(model="claude/server-tool", messages=CHAT) as stream:
        final = stream.get_final_completion()
    assert not final.choices[0].message.tool_calls
    assert final.choices[0].message.content == "".join(TEXT_PIECES)
    assert final.choices[0].finish_reason == "stop"


def test_langchain_bind_tools_stream(gw: Gateway) -> None:
    llm = ChatOpenAI(
        model="claude/two-tools",
        base_url=gw.v1,
        api_key="client-key",  # type: ignore[arg-type]
        streaming=True,
        max_retries=0,
        stream_usage=True,
    ).bind_tools(TOOLS)
    total = None
    for chunk in llm.stream("go"):
        total = chunk if total is None else total + chunk
    assert total is not None
    got = [(c["name"], c["args"]) for c in total.tool_calls]  # type: ignore[attr-defined]
    assert got == TOOL_ARGS
    assert not total.invalid_tool_calls  # type: ignore[attr-defined]
    assert total.content == "".join(TEXT_PIECES)
    usage = total.usage_metadata  # type: ignore[attr-defined]
    assert usage["input_tokens"] == PROMPT_TOKENS
    assert usage["output_tokens"] == OUTPUT_TOKENS


def test_non_streaming(oai: openai.OpenAI, fake: FakeAnthropic) -> None:
    history: list[Any] = [
        *CHAT,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "t1", "type": "function", "function": {"name": "now", "arguments": ""}}
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": ""},
    ]
    completion = oai.chat.completions.create(
        model="claude/two-tools", messages=history, tools=TOOLS
    )
    message = completion.choices[0].message
    assert message.content == "".join(TEXT_PIECES)
    calls = message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == TOOL_ARGS  # type: ignore[union-attr]
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.usage is not None
    assert completion.usage.total_tokens == PROMPT_TOKENS + OUTPUT_TOKENS
    sent = fake.requests[-1].body
    assert "stream" not in sent
    assert sent["messages"][1] == {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "now", "input": {}}],
    }
    assert sent["messages"][2] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1"}],
    }


FAILURES = [
    ("claude/fail-529", 502, openai.InternalServerError),
    ("claude/fail-400", 400, openai.BadRequestError),
    ("claude/error-before", 502, openai.InternalServerError),
]


@pytest.mark.parametrize(
    ("model", "status", "exc", "stream"),
    [
        (*case, stream)
        for case in FAILURES
        for stream in (False, True)
        if stream or not case[0].endswith("error-before")  # an error event is stream-only
    ],
)
def test_upstream_failures_before_commit(
    oai: openai.OpenAI, gw: Gateway, model: str, status: int, exc: type[Exception], stream: bool
) -> None:
    body = json.dumps({"model": model, "messages": CHAT, "stream": stream}).encode()
    got, _, data = post(gw, body)
    assert got == status, data
    error = error_of(data)
    if status == 400:
        assert error["code"] == "invalid_request_error"
        assert error["message"] == "scenario fail-400"
    with pytest.raises(exc):
        oai.chat.completions.create(model=model, messages=CHAT, stream=stream)  # type: ignore[call-overload]


def test_error_after_commit_is_an_error_event(oai: openai.OpenAI, gw: Gateway) -> None:
    body = json.dumps({"model": "claude/error-after", "messages": CHAT, "stream": True}).encode()
    status, _, data = post(gw, body)
    assert status == 200
    events = [e.removeprefix(b"data: ") for e in data.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    assert json.loads(events[-2])["error"]["message"] == "Overloaded"
    assert any(b'"content"' in e for e in events[:-2])
    with (
        pytest.raises(openai.APIError),
        oai.chat.completions.create(
            model="claude/error-after", messages=CHAT, stream=True
        ) as stream,
    ):
        for _ in stream:
            pass


def test_untranslatable_request_is_a_400(gw: Gateway) -> None:
    body = json.dumps({"model": "claude/text", "messages": CHAT, "n": 2}).encode()
    status, _, data = post(gw, body)
    assert status == 400, data
    assert error_of(data)["param"] == "n"
