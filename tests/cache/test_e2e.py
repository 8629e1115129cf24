"""Identical requests, one upstream call, identical assembled answers: every API x mode with
real clients against a real gateway process (and the reverse modes)."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable

import pytest

from tests.cache.clients import Assembled
from tests.cache.clients import chat
from tests.cache.clients import messages
from tests.cache.clients import responses
from tests.cache.clients import upstream_calls
from tests.e2e.conftest import Gateway
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e

APIS: dict[str, Callable[..., Assembled]] = {
    "chat": chat,
    "responses": responses,
    "messages": messages,
}
MODES = list(itertools.product([False, True], repeat=2))  # (fill streamed, hit streamed)


@pytest.mark.parametrize("api", sorted(APIS))
@pytest.mark.parametrize(("fill_stream", "hit_stream"), MODES)
def test_identical_requests_one_upstream_call_same_answer(
    cached_gateway: Gateway,
    upstream: FakeOpenAI,
    api: str,
    fill_stream: bool,
    hit_stream: bool,
) -> None:
    call = APIS[api]
    prompt = f"weather in Paris? {uuid.uuid4().hex}"
    header, first = call(cached_gateway, prompt, stream=fill_stream)
    assert header == "miss"
    header, again = call(cached_gateway, prompt, stream=hit_stream)
    assert header == "hit"
    assert upstream_calls(upstream, prompt) == 1
    if fill_stream == hit_stream:
        assert again == first
    else:
        # a stored stream served whole, or the reverse: the same answer, whatever the mode
        assert again["text"] == first["text"]
        assert again["calls"] == first["calls"]
        assert again["usage"] == first["usage"]
    if fill_stream and api != "responses":
        assert first["calls"], "the streamed answer had its tool call"


@pytest.mark.parametrize("hit_stream", [False, True])
def test_parallel_tool_calls_replay_in_order(
    cached_gateway: Gateway, upstream: FakeOpenAI, hit_stream: bool
) -> None:
    prompt = f"three things {uuid.uuid4().hex}"
    _, first = chat(cached_gateway, prompt, stream=True, model="parallel")
    header, again = chat(cached_gateway, prompt, stream=hit_stream, model="parallel")
    assert header == "hit"
    assert len(first["calls"]) == 3
    assert again["calls"] == first["calls"]
    assert again["finish"] == "tool_calls"
    assert upstream_calls(upstream, prompt) == 1
