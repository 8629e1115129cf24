"""Which upstreams can continue an answer from a trailing assistant turn (a stream broken
after content goes on there, docs/routing.md "Continuation after content"), and that the
continuation's request reaches them as that turn."""

from __future__ import annotations

import json

import pytest

from gateway.config import parse_config
from gateway.errors import UpstreamProtocolError
from gateway.providers.anthropic.request import translate_messages as anthropic_messages
from gateway.providers.base import CONTINUE_FINAL_MESSAGE
from gateway.providers.base import PREFILL
from gateway.providers.base import PREFIX
from gateway.providers.bedrock.request import translate_messages as bedrock_messages
from gateway.providers.registry import make_adapter
from gateway.stream.accumulator import StreamAccumulator
from gateway.stream.continuation import Continuation
from gateway.wire.openai_chat import ChatChunk
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import ChunkChoice
from gateway.wire.openai_chat import Delta
from gateway.wire.openai_chat import Message

PROVIDERS = [
    ({"kind": "anthropic", "keys": [{"key": "k"}]}, "claude-sonnet-4-5", PREFILL),
    ({"kind": "bedrock", "region": "us-east-1", "keys": [{"key": "k"}]},
     "us.anthropic.claude-sonnet-4-5-v1:0", PREFILL),
    ({"kind": "bedrock", "region": "us-east-1", "keys": [{"key": "k"}]}, "amazon.nova-pro-v1:0",
     None),
    ({"kind": "openai", "keys": [{"key": "k"}]}, "gpt-4o", None),
    ({"kind": "openai", "keys": [{"key": "k"}], "base_url": "http://127.0.0.1:1/v1",
      "continuation": "continue_final_message"}, "qwen", CONTINUE_FINAL_MESSAGE),
    ({"kind": "openai", "keys": [{"key": "k"}], "continuation": "prefix",
      "base_url": "http://127.0.0.1:1/beta"}, "deepseek-chat", PREFIX),
    ({"kind": "azure", "keys": [{"key": "k"}], "base_url": "https://x.openai.azure.com",
      "api_version": "2024-10-21"}, "gpt-4o", None),
    ({"kind": "gemini", "keys": [{"key": "k"}]}, "gemini-2.5-pro", None),
    ({"kind": "ollama"}, "llama3", None),
]  # fmt: skip


@pytest.mark.parametrize(("provider", "model", "mode"), PROVIDERS)
def test_each_kind_declares_how_it_continues_an_answer(
    provider: dict[str, object], model: str, mode: str | None
) -> None:
    config = parse_config(json.dumps({"providers": [{"name": "p", **provider}]}), env={})
    assert make_adapter(config.providers[0]).prefill_mode(model) == mode


def test_a_prefill_reaches_anthropic_and_bedrock_as_the_last_assistant_turn() -> None:
    acc = StreamAccumulator()
    delta = Delta(role="assistant", content="Grüße aus Köln — the ")
    acc.add(ChatChunk(id="c", choices=[ChunkChoice(index=0, delta=delta)]))
    continuation = Continuation(acc, UpstreamProtocolError("cut"))
    asked = ChatRequest(model="m", messages=[Message(role="user", content="hi")])
    request, _ = continuation.request(asked, {"messages": []}, PREFILL)
    _, turns = anthropic_messages(request.messages)
    assert turns[-1].role == "assistant"
    assert [b.text for b in turns[-1].content] == ["Grüße aus Köln — the"]  # no trailing space
    _, converse = bedrock_messages(request.messages)
    assert converse[-1].role == "assistant"
    assert [b.text for b in converse[-1].content] == ["Grüße aus Köln — the"]
