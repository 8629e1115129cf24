"""Real clients through a running gateway in front of the fake Gemini upstream."""

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
from tests.upstreams.gemini_upstream import CALLS
from tests.upstreams.gemini_upstream import MODEL_VERSION
from tests.upstreams.gemini_upstream import TEXT_PIECES
from tests.upstreams.gemini_upstream import FakeGemini

KEY = "gk-test"
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {
                "type": "object",
                "properties": {k: {"type": "string"} for k in args},
                "additionalProperties": False,
            },
        },
    }
    for name, args in CALLS
]
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGemini]:
    upstream = FakeGemini().start()
    yield upstream
    upstream.stop()


@pytest.fixture(scope="module")
def gw(fake: FakeGemini, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    config = f"""
server: {{shutdown_grace_s: 5}}
store: {{url: "memory://"}}
providers:
  - name: gem
    kind: gemini
    base_url: {fake.base_url}
    keys: [{{key: {KEY}}}]
    timeouts: {{first_byte_s: 5, idle_s: 5}}
"""
    gateway = start_gateway(config, tmp_path_factory.mktemp("gw-gemini"))
    yield gateway
    stop_gateway(gateway)


def client(gw: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key="client-key", max_retries=0, timeout=20)


def test_stream_helper_gets_two_distinct_calls(gw: Gateway, fake: FakeGemini) -> None:
    with client(gw).chat.completions.stream(
        model="gem/parallel-2", messages=HI, tools=TOOLS
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == CALLS
    assert [c.index for c in calls] == [0, 1]  # type: ignore[attr-defined]
    assert len({c.id for c in calls}) == 2
    assert final.choices[0].finish_reason == "tool_calls"
    assert len(final.choices) == 1

    sent = fake.requests[-1]
    assert sent.path == "/v1beta/models/parallel-2:streamGenerateContent?alt=sse"
    assert sent.headers["x-goog-api-key"] == KEY
    assert "Authorization" not in sent.headers
    assert sent.body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    declared = sent.body["tools"][0]["functionDeclarations"]
    assert [d["name"] for d in declared] == [name for name, _ in CALLS]
    assert "additionalProperties" not in declared[0]["parameters"]


def test_raw_chunks_have_indexes_0_and_1_and_one_finish(gw: Gateway) -> None:
    chunks = list(
        client(gw).chat.completions.create(
            model="gem/parallel-2", messages=HI, tools=TOOLS, stream=True
        )
    )
    deltas = [tc for ch in chunks for c in ch.choices for tc in c.delta.tool_calls or []]
    assert [d.index for d in deltas] == [0, 1]
    assert all(d.id and d.function and d.function.name for d in deltas)
    finishes = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
    assert finishes == ["tool_calls"]
    assert all(ch.usage is None for ch in chunks)


def test_langchain_gets_the_calls(gw: Gateway) -> None:
    llm = ChatOpenAI(
        base_url=gw.v1, api_key="client-key", model="gem/parallel-2", max_retries=0, timeout=20
    ).bind_tools(TOOLS)
    final: Any = None
    for piece in llm.stream("go"):
        final = piece if final is None else final + piece
    assert [(c["name"], c["args"]) for c in final.tool_calls] == CALLS
    assert len({c["id"] for c in final.tool_calls}) == 2


def test_langchain_text_then_call(gw: Gateway) -> None:
    llm = ChatOpenAI(
        base_url=gw.v1, api_key="client-key", model="gem/text-then-call", max_retries=0, timeout=20
    ).bind_tools(TOOLS)
    final: Any = None
    for piece in llm.stream("go"):
        final = piece if final is None else final + piece
    assert final.content == "Let me check."
    assert [(c["name"], c["args"]) for c in final.tool_calls] == CALLS[:1]


def test_text_with_usage_when_asked(gw: Gateway) -> None:
    chunks = list(
        client(gw).chat.completions.create(
            model="gem/text", messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.delta.content or "" for ch in chunks for c in ch.choices)
    assert text == "".join(TEXT_PIECES)
    with_usage = [i for i, ch in enumerate(chunks) if ch.usage is not None]
    assert with_usage == [len(chunks) - 1]
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens, usage.total_tokens) == (11, 7, 18)
    finishes = [c.finish_reason for ch in chunks for c in ch.choices if c.finish_reason]
    assert finishes == ["stop"]
    assert chunks[0].model == MODEL_VERSION


def test_unary(gw: Gateway, fake: FakeGemini) -> None:
    c = client(gw)
    text = c.chat.completions.create(model="gem/text", messages=HI, max_tokens=50)
    assert text.choices[0].message.content == "".join(TEXT_PIECES)
    assert text.usage is not None
    assert text.usage.total_tokens == 18
    sent = fake.requests[-1]
    assert sent.path == "/v1beta/models/text:generateContent"
    assert sent.body["generationConfig"] == {"maxOutputTokens": 50}
    calls = c.chat.completions.create(model="gem/parallel-2", messages=HI, tools=TOOLS)
    message = calls.choices[0].message
    assert calls.choices[0].finish_reason == "tool_calls"
    got = [(t.function.name, json.loads(t.function.arguments)) for t in message.tool_calls or []]
    assert got == CALLS


def test_history_with_tool_results_and_empty_content(gw: Gateway, fake: FakeGemini) -> None:
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
    client(gw).chat.completions.create(model="gem/text", messages=messages, stream=True).close()
    body = fake.requests[-1].body
    assert body["systemInstruction"] == {"parts": [{"text": "Be brief."}]}
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": "weather?"}]},
        {
            "role": "model",
            "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
        },
        {
            "role": "user",
            "parts": [{"functionResponse": {"name": "get_weather", "response": {"temp": 30}}}],
        },
    ]


@pytest.mark.parametrize(
    ("model", "exc"),
    [("gem/fail-503", openai.InternalServerError), ("gem/fail-429", openai.RateLimitError)],
)
@pytest.mark.parametrize("stream", [False, True])
def test_errors_before_content(gw: Gateway, model: str, exc: type[Exception], stream: bool) -> None:
    with pytest.raises(exc) as info:
        client(gw).chat.completions.create(model=model, messages=HI, stream=stream)  # type: ignore[call-overload]
    assert isinstance(info.value, openai.APIStatusError)
    assert info.value.status_code == (429 if "429" in model else 502)


def test_error_event_after_content(gw: Gateway) -> None:
    got: list[str] = []

    def read() -> None:
        stream = client(gw).chat.completions.create(
            model="gem/error-after", messages=HI, stream=True
        )
        for ch in stream:
            got.extend(c.delta.content or "" for c in ch.choices)

    with pytest.raises(openai.APIError) as info:
        read()
    assert "".join(got) == TEXT_PIECES[0]
    assert "model crashed" in str(info.value)


def test_rejected_field_is_a_400(gw: Gateway) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client(gw).chat.completions.create(model="gem/text", messages=HI, n=2)
    assert info.value.body["param"] == "n"  # type: ignore[index]
