"""What real clients end up with, through a running gateway and a fake OpenAI upstream."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest
from langchain_openai import ChatOpenAI
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.e2e.conftest import Gateway
from tests.upstreams.openai_upstream import CALL_NAMES
from tests.upstreams.openai_upstream import EXPECTED_ARGS
from tests.upstreams.openai_upstream import TEXT_PIECES
from tests.upstreams.openai_upstream import FakeOpenAI

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"the {name} tool",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    for name in CALL_NAMES
]
PARALLEL = [("up/interleaved-2", 2), ("up/interleaved-2-swap", 2), ("up/interleaved-3", 3)]


def client(gateway: Gateway) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.v1, api_key="client-key", max_retries=0, timeout=20)


def expected_calls(count: int) -> list[tuple[str, dict[str, Any]]]:
    return [(name, EXPECTED_ARGS[name]) for name in CALL_NAMES[:count]]


@pytest.mark.parametrize(("model", "count"), PARALLEL)
def test_openai_stream_helper_gets_distinct_calls(gateway: Gateway, model: str, count: int) -> None:
    with client(gateway).chat.completions.stream(
        model=model, messages=[{"role": "user", "content": "go"}], tools=TOOLS
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    message = final.choices[0].message
    calls = message.tool_calls or []
    got = [(c.function.name, json.loads(c.function.arguments)) for c in calls]
    assert got == expected_calls(count)
    assert len({c.id for c in calls}) == count
    assert final.choices[0].finish_reason == "tool_calls"
    assert len(final.choices) == 1


@pytest.mark.parametrize(("model", "count"), PARALLEL)
def test_openai_stream_state_over_raw_chunks(gateway: Gateway, model: str, count: int) -> None:
    state = ChatCompletionStreamState()
    finishes = []
    stream = client(gateway).chat.completions.create(
        model=model, messages=[{"role": "user", "content": "go"}], tools=TOOLS, stream=True
    )
    for chunk in stream:
        state.handle_chunk(chunk)
        finishes += [c.finish_reason for c in chunk.choices if c.finish_reason]
        assert all(c.index == 0 for c in chunk.choices)
    completion = state.get_final_completion()
    calls = completion.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == (
        expected_calls(count)
    )
    assert finishes == ["tool_calls"]


@pytest.mark.parametrize(("model", "count"), PARALLEL)
def test_langchain_streaming_gets_distinct_calls(gateway: Gateway, model: str, count: int) -> None:
    llm = ChatOpenAI(
        model=model, base_url=gateway.v1, api_key="client-key", streaming=True, max_retries=0
    ).bind_tools(TOOLS)
    total = None
    for chunk in llm.stream("go"):
        total = chunk if total is None else total + chunk
    assert total is not None
    got = [(c["name"], c["args"]) for c in total.tool_calls]  # type: ignore[attr-defined]
    assert got == expected_calls(count)
    assert not total.invalid_tool_calls  # type: ignore[attr-defined]


def test_broken_upstream_indexes_are_renumbered(gateway: Gateway) -> None:
    """A server that gives two calls the same index (distinct ids): routed by id."""
    with client(gateway).chat.completions.stream(
        model="up/reuse-index", messages=[{"role": "user", "content": "go"}], tools=TOOLS
    ) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == (
        expected_calls(2)
    )


def test_mock_model_calls_two_tools_in_parallel(gateway: Gateway) -> None:
    tools: list[Any] = [
        {
            "type": "function",
            "function": {
                "name": "lookup",
                "parameters": {
                    "type": "object",
                    "properties": {"q": {"type": "string"}, "n": {"type": "integer"}},
                },
            },
        },
        {
            "type": "function",
            "function": {
                "name": "convert",
                "parameters": {"type": "object", "properties": {"unit": {"enum": ["c", "f"]}}},
            },
        },
    ]
    with client(gateway).chat.completions.stream(
        model="mock", messages=[{"role": "user", "content": "go"}], tools=tools
    ) as stream:
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls or []
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("lookup", {"q": "mock", "n": 1}),
        ("convert", {"unit": "c"}),
    ]


def test_text_stream_and_unary(gateway: Gateway) -> None:
    c = client(gateway)
    pieces = [
        ch.choices[0].delta.content or ""
        for ch in c.chat.completions.create(
            model="up/text", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        if ch.choices
    ]
    assert "".join(pieces) == "".join(TEXT_PIECES)
    unary = c.chat.completions.create(model="up/text", messages=[{"role": "user", "content": "hi"}])
    assert unary.choices[0].message.content == "".join(TEXT_PIECES)
    assert unary.usage is not None
    assert unary.usage.total_tokens == 18
    mock = c.chat.completions.create(model="mock", messages=[{"role": "user", "content": "hi"}])
    assert (mock.choices[0].message.content or "").startswith("Hello from the gateway")
    assert mock.usage is not None
    assert mock.usage.completion_tokens > 0


def test_usage_only_when_asked_and_exactly_once_last(
    gateway: Gateway, upstream: FakeOpenAI
) -> None:
    c = client(gateway)
    chunks = list(
        c.chat.completions.create(
            model="up/text", messages=[{"role": "user", "content": "hi"}], stream=True
        )
    )
    assert upstream.requests[-1].body["stream_options"] == {"include_usage": True}
    assert all(ch.usage is None for ch in chunks)
    assert all(ch.choices for ch in chunks)

    chunks = list(
        c.chat.completions.create(
            model="up/text",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    with_usage = [i for i, ch in enumerate(chunks) if ch.usage is not None]
    assert with_usage == [len(chunks) - 1]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (11, 7)


def test_request_forwarded_as_sent(gateway: Gateway, upstream: FakeOpenAI) -> None:
    messages: list[Any] = [
        {"role": "system", "content": ""},
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": ""},
        {"role": "assistant", "content": None, "refusal": None},
    ]
    client(gateway).chat.completions.create(
        model="up/text",
        messages=messages,
        stream=True,
        extra_body={"future_param": {"nested": [1, "", None]}, "top_k": 3},
    ).close()
    sent = upstream.requests[-1]
    assert sent.body["messages"] == messages
    assert sent.body["future_param"] == {"nested": [1, "", None]}
    assert sent.body["top_k"] == 3
    assert sent.body["model"] == "text"
    assert sent.headers["Authorization"] == "Bearer sk-upstream-secret-123"
    assert "client-key" not in json.dumps(sent.headers)
