"""Semantic mode's pure parts and its index: what is embedded, what must match exactly (the
context, hypothesis-tested), the cosine search, and the index's bounds in memory and in
sqlite (shared by two processes' stores, as workers share the file)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from gateway.cache.redis_vectors import RedisVectorIndex
from gateway.cache.semantic import context_key
from gateway.cache.semantic import last_user_text
from gateway.cache.semantic import nearest
from gateway.cache.semantic import unit
from gateway.cache.vectors import MemoryVectorIndex
from gateway.cache.vectors import SqliteVectorIndex
from gateway.cache.vectors import VectorIndex
from tests.redis_server import RedisServer
from tests.redis_server import redis_server

__all__ = ["redis_server"]


def chat(last: Any, system: str = "be terse", **extra: Any) -> dict[str, Any]:
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": "hello"},
            {"role": "assistant", "content": "hi"},
            {"role": "user", "content": last},
        ],
        **extra,
    }


def bucket(body: dict[str, Any], namespace: str = "key:a", native: Any = None) -> str:
    turn = last_user_text(body)
    assert turn is not None
    return context_key(
        api="chat",
        namespace=namespace,
        model="m",
        targets=["up/m"],
        chat=body,
        native=native,
        turn=turn[0],
    )


def test_the_last_user_turn_is_what_is_embedded() -> None:
    assert last_user_text(chat("  What now?  ")) == (3, "What now?")
    parts = [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert last_user_text(chat(parts)) == (3, "a\nb")
    image = [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "x"}}]
    assert last_user_text(chat(image)) is None  # no text stands for an image
    assert last_user_text(chat("   ")) is None
    tool_last = {"messages": [{"role": "tool", "content": "42", "tool_call_id": "c"}]}
    assert last_user_text(tool_last) is None
    assert last_user_text({"messages": []}) is None


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1).filter(str.strip), st.text(min_size=1).filter(str.strip))
def test_the_context_is_the_same_whatever_the_last_turn_says(a: str, b: str) -> None:
    assert bucket(chat(a)) == bucket(chat(b))


@pytest.mark.parametrize(
    "other",
    [
        chat("q", system="be verbose"),
        chat("q", temperature=0.1),
        chat("q", tools=[{"type": "function", "function": {"name": "f", "parameters": {}}}]),
        chat("q", max_tokens=5),
        {**chat("q"), "messages": chat("q")["messages"][:1] + chat("q")["messages"][3:]},
    ],
)
def test_everything_else_must_match(other: dict[str, Any]) -> None:
    assert bucket(chat("q")) != bucket(other)


def test_namespaces_and_native_fields_keep_buckets_apart() -> None:
    assert bucket(chat("q")) != bucket(chat("q"), namespace="key:b")
    native = {"model": "m", "input": "q", "instructions": "x"}
    assert bucket(chat("q"), native=native) == bucket(chat("q"), native={**native, "input": "z"})
    assert bucket(chat("q"), native=native) != bucket(
        chat("q"), native={**native, "instructions": "y"}
    )


def test_nearest_and_unit() -> None:
    rows = np.vstack([unit([1.0, 0.0]), unit([1.0, 1.0]), unit([0.0, 1.0])])
    query = unit([0.9, 1.0])
    assert query is not None
    found = nearest(rows, query)
    assert found is not None
    assert found[0] == 1
    assert found[1] == pytest.approx(0.9986, abs=1e-3)
    assert unit([0.0, 0.0]) is None
    assert unit([float("nan"), 1.0]) is None
    other_dimension = unit([1.0, 0.0, 0.0])
    assert other_dimension is not None
    assert nearest(rows, other_dimension) is None


def vec(*values: float) -> Any:
    found = unit(list(values))
    assert found is not None
    return found


async def test_memory_index_bound_expiry_and_drop() -> None:
    index = MemoryVectorIndex(max_entries=3)
    for i in range(4):
        await index.add("b", f"k{i}", vec(1.0, float(i)), 60)
    assert len(index) == 3  # the oldest went first
    found = await index.search("b", vec(1.0, 0.0))
    assert found is not None
    assert found[0] == "k1"
    await index.drop("k1")
    found = await index.search("b", vec(1.0, 0.0))
    assert found is not None
    assert found[0] == "k2"
    assert await index.search("other", vec(1.0, 0.0)) is None
    await index.add("b", "short", vec(1.0, -5.0), 0.01)
    await asyncio.sleep(0.05)
    found = await index.search("b", vec(1.0, -5.0))
    assert found is not None
    assert found[0] != "short"


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
async def test_a_shared_index_is_shared_bounded_and_expires(
    kind: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Two processes' indexes on one sqlite file, or on one real redis (replicas)."""
    if kind == "sqlite":
        path = str(tmp_path / "gw.db")

        def make() -> VectorIndex:
            return SqliteVectorIndex(path, max_entries=3)
    else:
        server: RedisServer = request.getfixturevalue("redis_server")

        def make() -> VectorIndex:
            return RedisVectorIndex(server.url(), max_entries=3)

    one, two, later = make(), make(), make()
    try:
        await one.add("b", "k0", vec(1.0, 0.0), 60)
        found = await two.search("b", vec(1.0, 0.1))  # another worker's vector
        assert found is not None
        assert found[0] == "k0"
        for i in range(1, 4):
            await two.add("b", f"k{i}", vec(1.0, float(i)), 60)
        if isinstance(one, SqliteVectorIndex):
            assert await one.count() == 3
        found = await later.search("b", vec(1.0, 0.0))  # a process started now reads all
        assert found is not None
        assert found[0] == "k1"  # k0, the oldest, is gone from the store
        await one.add("b", "short", vec(0.0, 1.0), 0.01)
        await asyncio.sleep(0.05)
        found = await one.search("b", vec(0.0, 1.0))
        assert found is not None
        assert found[0] != "short"
    finally:
        for index in (one, two, later):
            await index.close()
