"""Microbenchmark of semantic mode's search (docs/cache.md, "Semantic mode"): one nearest
question among N stored vectors of one bucket, in the memory index and in the sqlite table
(read and compared on the store's thread), at OpenAI text-embedding-3-small's 1536
dimensions; and the memory one vector takes.

    .venv/bin/python -m pytest -q bench/micro/test_cache_semantic.py --benchmark-enable \
        --benchmark-only

Each variant checks that it found the vector it was built to find.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gateway.cache.semantic import unit
from gateway.cache.vectors import MemoryVectorIndex
from gateway.cache.vectors import SqliteVectorIndex

DIMENSIONS = 1536
PerEvent = Callable[[int], None]


def vectors(count: int) -> list[Any]:
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((count, DIMENSIONS), dtype=np.float32)
    return [unit(row) for row in rows]


@pytest.fixture
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


@pytest.mark.benchmark(group="cache-semantic")
@pytest.mark.parametrize("count", [1_000, 10_000])
@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_semantic_search(
    benchmark: Any,
    per_event: PerEvent,
    loop: asyncio.AbstractEventLoop,
    tmp_path: Path,
    store: str,
    count: int,
) -> None:
    per_event(1)  # one search
    stored = vectors(count)
    index: MemoryVectorIndex | SqliteVectorIndex = (
        MemoryVectorIndex(count)
        if store == "memory"
        else SqliteVectorIndex(str(tmp_path / "v.db"), count)
    )
    for i, vector in enumerate(stored):
        loop.run_until_complete(index.add("bucket", f"k{i}", vector, 3600))
    target = count // 2
    query = unit(stored[target] + 0.01 * stored[target + 1])
    assert query is not None
    loop.run_until_complete(index.search("bucket", query))  # the memory index's matrix, made

    def search() -> Any:
        return loop.run_until_complete(index.search("bucket", query))

    found = benchmark(search)
    assert found is not None
    assert found[0] == f"k{target}"
    if isinstance(index, MemoryVectorIndex):
        benchmark.extra_info["bytes_per_vector"] = DIMENSIONS * 4 * 2  # the rows and the matrix
    loop.run_until_complete(index.close())
