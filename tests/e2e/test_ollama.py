"""Real clients through a running gateway in front of the fake Ollama (`/api/chat`) upstream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.ollama_upstream import CALL_IDS
from tests.upstreams.ollama_upstream import CALLS
from tests.upstreams.ollama_upstream import ERROR
from tests.upstreams.ollama_upstream import EVAL_TOKENS
from tests.upstreams.ollama_upstream import PROMPT_TOKENS
from tests.upstreams.ollama_upstream import TEXT_PIECES
from tests.upstreams.ollama_upstream import FakeOllama

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": {k: {"type": "string"} for k in args}},
        },
    }
    for name, args in CALLS
]
HI: list[Any] = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeOllama]:
    upstream = FakeOllama().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeOllama, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
# the failures these tests provoke (and their retries) must not open the key's circuit
routing: {{circuit_failures: 1000}}
providers:
  - name: ol
    kind: ollama
    base_url: {fake.base_url}
    timeouts: {{first_byte_s: 5, idle_s: 5}}
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-ollama"))
    yield gateway
    stop_gateway(gateway)


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20)


def test_stream_helper_gets_two_calls(gw: Gateway, fake: FakeOllama) -> None:
    with client(gw).chat.completions.stream(
        model="ol/two-calls", messages=HI, tools=TOOLS, temperature=0.5, max_tokens=40
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == CALLS
    assert [c.function.arguments for c in calls] == [
        json.dumps(args, separators=(",", ":")) for _, args in CALLS
    ]
    assert [c.index for c in calls] == [0, 1]  # type: ignore[attr-defined]
    assert [c.id for c in calls] == CALL_IDS
    assert final.choices[0].finish_reason == "tool_calls"

    sent = fake.requests[-1]
    assert sent.path == "/api/chat"
    assert "Authorization" not in sent.headers
    assert sent.body == {
        "model": "two-calls",
        "messages": [{"role": "user", "content": "hi"}],
        "stream": True,
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": t["function"]["name"],
                    "description": t["function"]["description"],
                    "parameters": t["function"]["parameters"],
                },
            }
            for t in TOOLS
        ],
        "options": {"temperature": 0.5, "num_predict": 40},
    }


def test_raw_chunks_have_indexes_0_and_1_and_one_finish(gw: Gateway) -> None:
    chunks = list(
        client(gw).chat.completions.create(
            model="ol/two-calls", messages=HI, tools=TOOLS, stream=True
        )
    )
    deltas = [tc for ch in chunks for c in ch.choices for tc in c.delta.tool_calls or []]
    assert [d.index for d in deltas] == [0, 1]
    finishes = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
    assert finishes == ["tool_calls"]
    assert all(ch.usage is None for ch in chunks)


def test_text_with_usage_when_asked(gw: Gateway) -> None:
    chunks = list(
        client(gw).chat.completions.create(
            model="ol/text", messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.delta.content or "" for ch in chunks for c in ch.choices)
    assert text == "".join(TEXT_PIECES)
    with_usage = [i for i, ch in enumerate(chunks) if ch.usage is not None]
    assert with_usage == [len(chunks) - 1]
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (
        PROMPT_TOKENS,
        EVAL_TOKENS,
        PROMPT_TOKENS + EVAL_TOKENS,
    )
    finishes = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
    assert finishes == ["stop"]


def test_unary(gw: Gateway, fake: FakeOllama) -> None:
    c = client(gw)
    text = c.chat.completions.create(model="ol/text", messages=HI, max_tokens=50)
    assert text.choices[0].message.content == "".join(TEXT_PIECES)
    assert text.usage is not None
    assert text.usage.total_tokens == PROMPT_TOKENS + EVAL_TOKENS
    sent = fake.requests[-1]
    assert sent.body["stream"] is False
    assert sent.body["options"] == {"num_predict": 50}
    calls = c.chat.completions.create(model="ol/two-calls", messages=HI, tools=TOOLS)
    message = calls.choices[0].message
    assert calls.choices[0].finish_reason == "tool_calls"
    got = [
        (t.function.name, json.loads(t.function.arguments))  # type: ignore[union-attr]
        for t in message.tool_calls or []
    ]
    assert got == CALLS


def test_history_with_tool_results(gw: Gateway, fake: FakeOllama) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_9", "content": '{"temp": 30}'},
    ]
    client(gw).chat.completions.create(model="ol/text", messages=messages, stream=True).close()
    assert fake.requests[-1].body["messages"] == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}],
        },
        {"role": "tool", "content": '{"temp": 30}', "tool_name": "get_weather"},
    ]


def test_error_line_mid_stream(gw: Gateway) -> None:
    got: list[str] = []

    def read() -> None:
        stream = client(gw).chat.completions.create(model="ol/error-mid", messages=HI, stream=True)
        for ch in stream:
            got.extend(c.delta.content or "" for c in ch.choices)

    with pytest.raises(openai.APIError) as info:
        read()
    assert "".join(got) == TEXT_PIECES[0]
    assert ERROR in str(info.value)


@pytest.mark.parametrize("stream", [False, True])
def test_http_500(gw: Gateway, stream: bool) -> None:
    with pytest.raises(openai.InternalServerError) as info:
        client(gw).chat.completions.create(model="ol/fail-500", messages=HI, stream=stream)
    assert info.value.status_code == 502


def test_http_image_url_is_a_400(gw: Gateway) -> None:
    messages: list[Any] = [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}],
        }
    ]
    with pytest.raises(openai.BadRequestError) as info:
        client(gw).chat.completions.create(model="ol/text", messages=messages)
    assert info.value.body["param"] == "messages[0].content[0]"  # type: ignore[index]
