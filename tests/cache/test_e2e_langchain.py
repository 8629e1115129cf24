"""langchain's ChatOpenAI (its own request shape and stream assembly) through the cache:
the second identical call is answered from the entry, with the same text and tool calls."""

from __future__ import annotations

import uuid

import pytest
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI

from tests.cache.clients import TOOLS
from tests.cache.clients import upstream_calls
from tests.e2e.conftest import Gateway
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e


def _ask(gw: Gateway, prompt: str, *, streaming: bool) -> AIMessage:
    llm = ChatOpenAI(
        model="tools",
        base_url=gw.v1,
        api_key="sk-alice-1",  # type: ignore[arg-type]
        max_retries=0,
        streaming=streaming,
        stream_usage=True,
    )
    message = llm.bind_tools(TOOLS).invoke(prompt)
    assert isinstance(message, AIMessage)
    return message


@pytest.mark.parametrize(
    ("fill_stream", "hit_stream"), [(True, True), (False, True), (True, False)]
)
def test_langchain_gets_the_same_answer_from_the_cache(
    cached_gateway: Gateway, upstream: FakeOpenAI, fill_stream: bool, hit_stream: bool
) -> None:
    prompt = f"weather in Paris? {uuid.uuid4().hex}"
    first = _ask(cached_gateway, prompt, streaming=fill_stream)
    again = _ask(cached_gateway, prompt, streaming=hit_stream)
    assert upstream_calls(upstream, prompt) == 1
    if fill_stream:  # the fake's streamed answer ends in a call (its unary one is text)
        assert first.tool_calls, "the answer had its tool call"
    assert [(c["id"], c["name"], c["args"]) for c in again.tool_calls] == [
        (c["id"], c["name"], c["args"]) for c in first.tool_calls
    ]
    assert again.content == first.content
    assert first.usage_metadata is not None
    assert again.usage_metadata is not None
    assert again.usage_metadata["input_tokens"] == first.usage_metadata["input_tokens"]
    assert again.usage_metadata["output_tokens"] == first.usage_metadata["output_tokens"]
