"""The canonical key: equal for requests that mean the same answer, different otherwise."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.cache.key import cache_key

TEXT = st.text(max_size=20)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant", "system"]), "content": TEXT}
)
TOOL = st.builds(
    lambda name: {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": {}}},
    },
    st.from_regex(r"[a-z]{1,8}", fullmatch=True),
)
OPTIONAL: dict[str, Any] = {
    "temperature": st.floats(0, 2).filter(lambda t: t != 1.0),
    "top_p": st.floats(0, 0.99),
    "max_tokens": st.integers(1, 4096),
    "seed": st.integers(0, 2**31),
    "stop": st.lists(st.text(min_size=1, max_size=4), min_size=1, max_size=3),
    "reasoning_effort": st.sampled_from(["low", "medium", "high"]),
    "response_format": st.just({"type": "json_object"}),
    "tools": st.lists(TOOL, min_size=1, max_size=3),
}
REQUEST = st.fixed_dictionaries(
    {"messages": st.lists(MESSAGE, min_size=1, max_size=4)},
    optional=OPTIONAL,
)


def key(body: dict[str, Any], **where: Any) -> str:
    args: dict[str, Any] = {"api": "chat", "namespace": "virtual:k", "model": "m"}
    args["targets"] = ["up/m"]
    args.update(where)
    return cache_key(chat=body, native=None, **args)


def reordered(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [reordered(v) for v in value]
    return value


@settings(max_examples=200)
@given(REQUEST)
def test_key_order_does_not_matter(body: dict[str, Any]) -> None:
    assert key(body) == key(reordered(body))


@settings(max_examples=200)
@given(REQUEST, st.data())
def test_explicit_defaults_and_delivery_fields_do_not_matter(
    body: dict[str, Any], data: st.DataObject
) -> None:
    spelled = copy.deepcopy(body)
    defaults: dict[str, Any] = {
        "temperature": 1,
        "top_p": 1.0,
        "n": 1,
        "presence_penalty": 0,
        "frequency_penalty": 0.0,
        "logprobs": False,
        "tool_choice": "auto" if "tools" in body else "none",
        "stream": data.draw(st.booleans()),
        "stream_options": {"include_usage": True},
        "user": data.draw(TEXT),
        "metadata": {"run": data.draw(TEXT)},
        "response_format": {"type": "text"},
        "logit_bias": None,
        "model": "whatever the client called it",
    }
    if "tools" in body:
        defaults["parallel_tool_calls"] = True
    for name in data.draw(st.sets(st.sampled_from(sorted(defaults)))):
        if name not in spelled:
            spelled[name] = defaults[name]
    if "max_tokens" in spelled and data.draw(st.booleans()):
        spelled["max_completion_tokens"] = spelled.pop("max_tokens")
    if isinstance(spelled.get("stop"), list) and len(spelled["stop"]) == 1:
        spelled["stop"] = spelled["stop"][0]
    assert key(body) == key(spelled)


CHANGES = {
    "messages": lambda b: b["messages"].append({"role": "user", "content": "and?"}),
    "content": lambda b: b["messages"][0].update(content=b["messages"][0]["content"] + "!"),
    "role": lambda b: b["messages"][0].update(
        role="assistant" if b["messages"][0]["role"] != "assistant" else "user"
    ),
    "tools": lambda b: b.update(
        tools=[*b.get("tools", []), {"type": "function", "function": {"name": "zzz9"}}]
    ),
    "tool_choice": lambda b: b.update(tool_choice="required"),
    "temperature": lambda b: b.update(temperature=b.get("temperature", 1.0) / 2 + 0.01),
    "top_p": lambda b: b.update(top_p=b.get("top_p", 1.0) / 2 + 0.001),
    "max_tokens": lambda b: b.update(max_tokens=b.get("max_tokens", 7) + 1),
    "seed": lambda b: b.update(seed=b.get("seed", 0) + 1),
    "stop": lambda b: b.update(stop=[*b.get("stop", []), "END9"]),
    "response_format": lambda b: b.update(
        response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}
    ),
    "reasoning_effort": lambda b: b.update(
        reasoning_effort="minimal" if b.get("reasoning_effort") != "minimal" else "high"
    ),
    "presence_penalty": lambda b: b.update(presence_penalty=0.5),
    "logprobs": lambda b: b.update(logprobs=True),
    "n": lambda b: b.update(n=2),
}


@settings(max_examples=300)
@given(REQUEST, st.sampled_from(sorted(CHANGES)))
def test_any_answer_shaping_change_changes_the_key(body: dict[str, Any], change: str) -> None:
    changed = copy.deepcopy(body)
    CHANGES[change](changed)
    assert key(body) != key(changed)


@given(REQUEST)
def test_model_api_namespace_and_targets_change_the_key(body: dict[str, Any]) -> None:
    base = key(body)
    assert key(body, model="other") != base
    assert key(body, api="messages") != base
    assert key(body, namespace="virtual:other") != base
    assert key(body, namespace="master:") != base
    assert key(body, targets=["up/m", "up2/m"]) != base


def test_the_native_request_is_part_of_the_key() -> None:
    body = {"messages": [{"role": "user", "content": "hi"}]}
    native_a = {"model": "m", "input": "hi", "stream": True}
    native_b = {"model": "m", "input": "hi", "top_k": 3}
    args: dict[str, Any] = {"api": "responses", "namespace": "n", "model": "m", "targets": []}
    a = cache_key(chat=body, native=native_a, **args)
    assert a == cache_key(chat=body, native={"input": "hi"}, **args)
    assert a != cache_key(chat=body, native=native_b, **args)
