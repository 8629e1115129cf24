"""Tool calls for models without tools (`tools: emulate`), as real clients end up seeing them.

The upstream is a model server that refuses `tools` and answers in prose (an Ollama-native and
an OpenAI-compatible face over the same replies); the gateway describes the tools in a system
prompt and turns the envelopes in the reply into tool calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.prose_upstream import REPLIES
from tests.upstreams.prose_upstream import USER_ARGS
from tests.upstreams.prose_upstream import WEATHER_ARGS
from tests.upstreams.prose_upstream import FakeProseModel

SCENARIOS = ["prose", "inline", "fenced", "two-calls", "unknown", "echo"]
KINDS = ["ol", "oa"]  # the Ollama-native and the OpenAI-compatible provider
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_user",
            "parameters": {"type": "object", "properties": {"user_id": {"type": "string"}}},
        },
    },
]
ASK: list[Any] = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeProseModel]:
    upstream = FakeProseModel().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeProseModel, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    models = "".join(
        f"""
  - name: {kind}-{scenario}
    tools: emulate
    targets: [{{provider: {kind}, model: {scenario}}}]"""
        for kind in KINDS
        for scenario in SCENARIOS
    )
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
providers:
  - name: ol
    kind: ollama
    base_url: {fake.base_url}
  - name: oa
    kind: openai
    base_url: {fake.base_url}/v1
    keys: [{{key: sk-local}}]
models:{models}
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-emulate"))
    yield gateway
    stop_gateway(gateway)


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20)


def final_of(gw: Gateway, model: str, **kwargs: Any) -> Any:
    with client(gw).chat.completions.stream(model=model, **kwargs) as stream:
        for _ in stream:
            pass
        return stream.get_final_completion()


@pytest.mark.parametrize("kind", KINDS)
def test_envelope_after_a_sentence_becomes_a_call(
    gw: Gateway, fake: FakeProseModel, kind: str
) -> None:
    final = final_of(gw, f"{kind}-inline", messages=ASK, tools=TOOLS)
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "Let me look that up."
    (call,) = choice.message.tool_calls or []
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == WEATHER_ARGS
    sent = fake.requests[-1].body
    assert "tools" not in sent
    assert "tool_choice" not in sent
    system = sent["messages"][0]
    assert system["role"] == "system"
    assert '"name":"get_weather"' in system["content"]
    assert '{"tool_calls": [' in system["content"]
    assert sent["messages"][1] == ASK[0]


@pytest.mark.parametrize("kind", KINDS)
def test_fenced_envelope_non_streaming(gw: Gateway, kind: str) -> None:
    completion = client(gw).chat.completions.create(
        model=f"{kind}-fenced", messages=ASK, tools=TOOLS
    )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content == "I will check."  # the fence went with the envelope
    (call,) = choice.message.tool_calls or []
    assert json.loads(call.function.arguments) == WEATHER_ARGS
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == 57


@pytest.mark.parametrize("kind", KINDS)
def test_two_calls_in_one_envelope_stream_as_two_indexes(gw: Gateway, kind: str) -> None:
    chunks = list(
        client(gw).chat.completions.create(
            model=f"{kind}-two-calls", messages=ASK, tools=TOOLS, stream=True
        )
    )
    deltas = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert [d.index for d in deltas] == [0, 1]
    assert len({d.id for d in deltas}) == 2
    assert [d.function.name for d in deltas if d.function] == ["get_weather", "get_user"]
    assert not any(c.choices[0].delta.content for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert [f for f in finishes if f] == ["tool_calls"]
    final = final_of(gw, f"{kind}-two-calls", messages=ASK, tools=TOOLS)
    args = [json.loads(c.function.arguments) for c in final.choices[0].message.tool_calls]
    assert args == [WEATHER_ARGS, USER_ARGS]


@pytest.mark.parametrize("kind", KINDS)
def test_unknown_tool_name_stays_text(gw: Gateway, kind: str) -> None:
    final = final_of(gw, f"{kind}-unknown", messages=ASK, tools=TOOLS)
    choice = final.choices[0]
    assert choice.message.tool_calls in (None, [])
    assert choice.message.content == REPLIES["unknown"]
    assert choice.finish_reason == "stop"


@pytest.mark.parametrize("kind", KINDS)
def test_prose_streams_unchanged(gw: Gateway, kind: str) -> None:
    chunks = list(
        client(gw).chat.completions.create(
            model=f"{kind}-prose", messages=ASK, tools=TOOLS, stream=True
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == REPLIES["prose"]  # its "{roughly}" included
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 5


def test_history_is_rendered_as_text_and_named_choice_is_prompted(
    gw: Gateway, fake: FakeProseModel
) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        *ASK,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_user", "arguments": '{"user_id":"u-42"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"temp": 21}'},
        {"role": "tool", "tool_call_id": "call_b", "content": "Ada"},
    ]
    choice = {"type": "function", "function": {"name": "get_user"}}
    completion = client(gw).chat.completions.create(
        model="oa-echo", messages=messages, tools=TOOLS, tool_choice=choice
    )
    content = completion.choices[0].message.content or ""
    assert content.startswith("SYSTEM[Be brief.\n\nYou can call tools.")
    assert 'You must call the tool "get_user"' in content
    assert content.endswith(
        "LAST[user:Result of the tool call get_weather (call_a):\n"
        '{"temp": 21}\n\nResult of the tool call get_user (call_b):\nAda]'
    )
    sent = fake.requests[-1].body["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
    assert sent[2]["content"] == (
        '{"tool_calls":[{"name":"get_weather","arguments":{"city":"Paris"}},'
        '{"name":"get_user","arguments":{"user_id":"u-42"}}]}'
    )


def test_tool_choice_none_sends_no_tool_prompt(gw: Gateway, fake: FakeProseModel) -> None:
    completion = client(gw).chat.completions.create(
        model="ol-echo", messages=ASK, tools=TOOLS, tool_choice="none"
    )
    assert completion.choices[0].message.content == (
        "SYSTEM[What is the weather in Paris?] LAST[user:What is the weather in Paris?]"
    )
    assert "tools" not in fake.requests[-1].body


def test_named_tool_that_is_not_offered_is_a_400(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        client(gw).chat.completions.create(
            model="ol-inline",
            messages=ASK,
            tools=TOOLS,
            tool_choice={"type": "function", "function": {"name": "launch_rocket"}},
        )
    assert raised.value.status_code == 400
    error = raised.value.body
    assert isinstance(error, dict)
    assert error.get("param") == "tool_choice"


def test_langchain_bind_tools_gets_the_call(gw: Gateway) -> None:
    llm = ChatOpenAI(
        model="ol-inline", base_url=gw.v1, api_key="client-key", max_retries=0, streaming=True
    )
    tools = [t["function"] for t in TOOLS]
    message = llm.bind_tools([{"type": "function", "function": f} for f in tools]).invoke(
        "What is the weather in Paris?"
    )
    assert [c["name"] for c in message.tool_calls] == ["get_weather"]
    assert message.tool_calls[0]["args"] == WEATHER_ARGS
