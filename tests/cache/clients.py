"""What real clients assemble from an answer, reduced to what a cache hit must reproduce:
text, tool calls (ids, names, arguments, in order), usage and finish; plus the cache header."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import openai
from openai.lib.streaming.chat import ChatCompletionStreamState

from tests.e2e.conftest import Gateway
from tests.upstreams.openai_upstream import CALL_NAMES
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
MESSAGES_TOOLS: list[Any] = [
    {"name": name, "description": f"the {name} tool", "input_schema": {"type": "object"}}
    for name in CALL_NAMES
]
Assembled = tuple[str | None, dict[str, Any]]  # (x-gateway-cache, the answer)


def openai_client(gw: Gateway, key: str = "sk-alice-1") -> openai.OpenAI:
    return openai.OpenAI(base_url=gw.v1, api_key=key, max_retries=0, timeout=30)


def upstream_calls(upstream: FakeOpenAI, marker: str) -> int:
    return sum(marker in json.dumps(r.body) for r in upstream.requests)


def chat(
    gw: Gateway,
    prompt: str,
    *,
    stream: bool,
    model: str = "tools",
    key: str = "sk-alice-1",
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> Assembled:
    client = openai_client(gw, key)
    args: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "tools": TOOLS,
        "extra_headers": headers or {},
        **extra,
    }
    if not stream:
        raw = client.chat.completions.with_raw_response.create(**args)
        completion = raw.parse()
    else:
        raw = client.chat.completions.with_raw_response.create(
            stream=True, stream_options={"include_usage": True}, **args
        )
        state = ChatCompletionStreamState()
        chunks = 0
        for chunk in raw.parse():
            state.handle_chunk(chunk)
            chunks += 1
        assert chunks >= 3  # a stream, never one giant chunk
        completion = state.get_final_completion()
    message = completion.choices[0].message
    calls = [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls or []]
    usage = completion.usage
    return raw.headers.get("x-gateway-cache"), {
        "text": message.content or "",
        "calls": calls,
        "usage": (usage.prompt_tokens, usage.completion_tokens) if usage else None,
        "finish": completion.choices[0].finish_reason,
    }


def responses(gw: Gateway, prompt: str, *, stream: bool, model: str = "tools") -> Assembled:
    client = openai_client(gw)
    args: dict[str, Any] = {"model": model, "input": prompt, "tools": _responses_tools()}
    if not stream:
        raw = client.responses.with_raw_response.create(**args)
        response = raw.parse()
        text = response.output_text
    else:
        raw = client.responses.with_raw_response.create(stream=True, **args)
        deltas, response = [], None
        for event in raw.parse():
            if event.type == "response.output_text.delta":
                deltas.append(event.delta)
            elif event.type == "response.completed":
                response = event.response
        assert response is not None
        text = "".join(deltas)
        assert text == response.output_text
    calls = [
        (item.call_id, item.name, item.arguments)
        for item in response.output
        if item.type == "function_call"
    ]
    usage = response.usage
    return raw.headers.get("x-gateway-cache"), {
        "text": text,
        "calls": calls,
        "usage": (usage.input_tokens, usage.output_tokens) if usage else None,
        "status": response.status,
    }


def _responses_tools() -> list[Any]:
    return [
        {"type": "function", "name": t["function"]["name"], "parameters": {"type": "object"}}
        for t in TOOLS
    ]


def messages(gw: Gateway, prompt: str, *, stream: bool, model: str = "tools") -> Assembled:
    client = anthropic.Anthropic(base_url=gw.url, api_key="sk-alice-1", max_retries=0)
    args: dict[str, Any] = {
        "model": model,
        "max_tokens": 200,
        "messages": [{"role": "user", "content": prompt}],
        "tools": MESSAGES_TOOLS,
    }
    try:
        if not stream:
            raw = client.messages.with_raw_response.create(**args)
            message, header = raw.parse(), raw.headers.get("x-gateway-cache")
        else:
            with client.messages.stream(**args) as events:
                for _ in events:
                    pass
                message = events.get_final_message()
                header = events.response.headers.get("x-gateway-cache")
    finally:
        client.close()
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [(b.id, b.name, b.input) for b in message.content if b.type == "tool_use"]
    return header, {
        "text": text,
        "calls": calls,
        "usage": (message.usage.input_tokens, message.usage.output_tokens),
        "stop": message.stop_reason,
    }
