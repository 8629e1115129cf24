"""The cache's decisions: controls, namespaces, per-model modes, one leader per key."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gateway.cache.config import CacheConfig
from gateway.cache.config import ModelCache
from gateway.cache.entry import CachedAnswer
from gateway.cache.service import ResponseCache
from gateway.cache.store import MemoryCacheStore

ANSWER = CachedAnswer(finish_reason="stop", content="hi")
BODY: dict[str, Any] = {"messages": [{"role": "user", "content": "q"}]}


def cache(**config: Any) -> ResponseCache:
    models = {"off": ModelCache(mode="off"), "short": ModelCache(ttl_s=0.05)}
    settings = CacheConfig(mode="exact", store="memory", **config)
    return ResponseCache(settings, models, MemoryCacheStore(1 << 20))


async def ask(c: ResponseCache, headers: dict[str, str] | None = None, **where: Any) -> Any:
    args: dict[str, Any] = {"api": "chat", "namespace": "ns", "model": "m", "targets": []}
    args.update(where)
    return await c.lookup(headers or {}, chat=BODY, native=None, **args)


async def test_miss_then_hit() -> None:
    c = cache()
    first = await ask(c)
    assert first.result == "miss"
    await c.finish(first, ANSWER)
    second = await ask(c)
    assert second.result == "hit"
    assert second.answer == ANSWER


async def test_no_store_neither_looks_up_nor_stores() -> None:
    c = cache()
    await c.finish(await ask(c), ANSWER)
    bypass = await ask(c, {"Cache-Control": "no-store"})
    assert bypass.result == "bypass"
    assert bypass.answer is None
    assert bypass.key is None


async def test_no_cache_skips_the_lookup_but_stores() -> None:
    c = cache()
    fresh = await ask(c, {"Cache-Control": "max-age=0, no-cache"})
    assert fresh.result == "bypass"
    await c.finish(fresh, ANSWER)
    assert (await ask(c)).result == "hit"


async def test_ttl_header_and_model_ttl() -> None:
    c = cache()
    short = await ask(c, {"x-gateway-cache-ttl": "0.05"})
    await c.finish(short, ANSWER)
    assert (await ask(c)).result == "hit"
    await asyncio.sleep(0.08)
    again = await ask(c)
    assert again.result == "miss"
    c.abandon(again)
    by_model = await ask(c, model="short")
    await c.finish(by_model, ANSWER)
    await asyncio.sleep(0.08)
    assert (await ask(c, model="short")).result == "miss"


async def test_a_model_with_cache_off_bypasses() -> None:
    assert (await ask(cache(), model="off")).result == "bypass"


async def test_namespaces_do_not_share() -> None:
    c = cache()
    await c.finish(await ask(c, namespace=c.namespace("virtual", "alice")), ANSWER)
    assert (await ask(c, namespace=c.namespace("virtual", "alice"))).result == "hit"
    assert (await ask(c, namespace=c.namespace("virtual", "bob"))).result == "miss"
    shared = cache(namespace="shared")
    assert shared.namespace("virtual", "a") == shared.namespace("virtual", "b")
    assert shared.namespace("virtual", "a") != shared.namespace("master", "")  # its own
    assert c.namespace("master", "") == "master" != c.namespace("open", "")


async def test_several_choices_bypass() -> None:
    c = cache()
    lookup = await c.lookup(
        {}, api="chat", namespace="n", model="m", targets=[], chat={**BODY, "n": 2}, native=None
    )
    assert lookup.result == "bypass"


async def test_fifty_identical_misses_have_one_leader() -> None:
    c = cache()
    lookups = [asyncio.create_task(ask(c)) for _ in range(50)]
    await asyncio.sleep(0.01)
    leaders = [t.result() for t in lookups if t.done()]
    assert len(leaders) == 1  # the others wait for it
    assert leaders[0].leader is not None
    await c.finish(leaders[0], ANSWER)
    rest = await asyncio.gather(*lookups)
    assert sum(lookup.result == "hit" for lookup in rest) == 49


async def test_waiters_go_upstream_when_the_leader_fails_or_is_slow() -> None:
    c = cache()
    leader = await ask(c)
    waiter = asyncio.create_task(ask(c))
    await asyncio.sleep(0.01)
    c.abandon(leader)
    follower = await waiter
    assert follower.result == "miss"  # it goes upstream itself (and leads from now on)
    c.abandon(follower)
    slow = cache(wait_s=0.05)
    first = await ask(slow)
    second = await asyncio.wait_for(ask(slow), 1)
    assert second.result == "miss"
    slow.abandon(first)


async def test_an_entry_over_max_entry_bytes_is_not_kept() -> None:
    c = cache(max_entry_bytes=64)
    first = await ask(c)
    await c.finish(first, CachedAnswer(finish_reason="stop", content="x" * 100))
    assert (await ask(c)).result == "miss"


async def test_a_client_that_leaves_during_the_embedding_leaves_no_leader_behind() -> None:
    """Semantic mode awaits the embedding after the request became its key's leader: a
    cancellation there must free the key, or every identical request would wait for a
    leader that never answers."""
    from gateway.cache.config import SemanticConfig
    from gateway.cache.semantic_search import SemanticSearch
    from gateway.cache.vectors import MemoryVectorIndex

    search = SemanticSearch(SemanticConfig(embedding_model="e"), MemoryVectorIndex(10))
    started = asyncio.Event()

    async def slow_embedder(text: str) -> Any:
        if not started.is_set():  # the first question hangs; later ones get no vector
            started.set()
            await asyncio.sleep(60)
        return None

    search.embedder = slow_embedder
    c = ResponseCache(
        CacheConfig(mode="semantic", store="memory"),
        {},
        MemoryCacheStore(1 << 20),
        semantic=search,
    )
    task = asyncio.create_task(ask(c))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert c._inflight == {}
    lookup = await asyncio.wait_for(ask(c), 0.5)  # not waiting for a leader: its own
    assert lookup.leader is not None
