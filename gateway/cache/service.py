"""The cache's decisions for one request: bypass, hit, or miss (and then, whether this
request is the one that goes upstream for its key or waits for another that already did).

`ResponseCache` lives on the gateway state when `cache.mode` is not `off` for some model;
otherwise there is none and the request path only checks for None.

Per request (`lookup`): `Cache-Control: no-store` bypasses both ways, `no-cache` skips the
lookup but stores the answer, `x-gateway-cache-ttl` sets this entry's lifetime; a model whose
mode is off, or a request for several choices, bypasses. A miss whose key is already being
answered upstream by another request of this process waits for it (at most `wait_s`) and is
answered from its entry (at most `wait_s`, and never past `routing.deadline_s`); if that
one fails (or takes too long) it goes upstream itself. A
store that fails is a miss (or an entry not kept), logged, never the request's error.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING
from typing import Any
from typing import Literal
from typing import NamedTuple

import msgspec

from gateway.cache import entry as entries
from gateway.cache.config import CacheConfig
from gateway.cache.config import ModelCache
from gateway.cache.entry import CachedAnswer
from gateway.cache.key import cache_key
from gateway.cache.store import CacheStore
from gateway.store.kv import StoreError

if TYPE_CHECKING:  # numpy and the index come only with semantic mode
    from gateway.cache.semantic_search import SemanticSearch

log = logging.getLogger("gateway.cache")

CACHE_HEADER = "x-gateway-cache"
TTL_HEADER = "x-gateway-cache-ttl"
Result = Literal["hit", "miss", "bypass"]


class Asked(NamedTuple):
    """What a request asks the cache, as the key and the semantic bucket are made of it."""

    api: str
    namespace: str
    model: str
    targets: list[str]
    chat: dict[str, Any]
    native: dict[str, Any] | None


class Lookup:
    """One request's cache decision, and what it must do once its answer is known."""

    __slots__ = (
        "answer",
        "bucket",
        "key",
        "leader",
        "result",
        "similarity",
        "store",
        "ttl_s",
        "vector",
    )

    def __init__(self, result: Result, key: str | None = None, ttl_s: float = 0.0) -> None:
        self.result: Result = result
        self.key = key
        self.ttl_s = ttl_s
        self.store = key is not None  # the answer is to be stored
        self.answer: CachedAnswer | None = None  # a hit's entry
        self.leader: asyncio.Future[CachedAnswer | None] | None = None
        self.similarity: float | None = None  # a semantic hit's
        # semantic mode: the request's bucket and its question's vector (kept with its answer)
        self.bucket: str | None = None
        self.vector: Any = None


def cache_directives(headers: Mapping[str, str]) -> frozenset[str]:
    value = headers.get("Cache-Control", "")
    return frozenset(part.strip().lower().partition("=")[0] for part in value.split(","))


def _ttl_of(headers: Mapping[str, str], default: float) -> float:
    raw = headers.get(TTL_HEADER)
    if raw is None:
        return default
    try:
        ttl = float(raw)
    except ValueError:
        return default
    return ttl if math.isfinite(ttl) and ttl > 0 else default


class ResponseCache:
    """The exact-mode cache of one gateway config."""

    def __init__(
        self,
        config: CacheConfig,
        models: Mapping[str, ModelCache | None],
        store: CacheStore,
        deadline_s: float = math.inf,
        semantic: SemanticSearch | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.semantic = semantic
        # a waiter never waits past the deadline its request would have had upstream
        self._wait_s = min(config.wait_s, deadline_s)
        # a model's (cached, semantic, ttl)
        self._modes: dict[str, tuple[bool, bool, float]] = {}
        for name, override in models.items():
            mode = (override.mode if override else None) or config.mode
            ttl = (override.ttl_s if override else None) or config.ttl_s
            self._modes[name] = (mode != "off", mode == "semantic", ttl)
        self._default = (config.mode != "off", config.mode == "semantic", config.ttl_s)
        self._inflight: dict[str, asyncio.Future[CachedAnswer | None]] = {}

    def namespace(self, kind: str, secret_hash: str) -> str:
        """Whose entries a request may see: its virtual key's own, or (`shared`) every
        virtual key's; the master key's are always its own."""
        if kind == "master":
            return "master"
        if self.config.namespace == "shared":
            return "shared"
        return f"{kind}:{secret_hash}"

    async def lookup(
        self,
        headers: Mapping[str, str],
        *,
        api: str,
        namespace: str,
        model: str,
        targets: list[str],
        chat: dict[str, Any],
        native: dict[str, Any] | None,
    ) -> Lookup:
        on, semantic, ttl = self._modes.get(model, self._default)
        directives = cache_directives(headers) if "Cache-Control" in headers else frozenset()
        n = chat.get("n")
        if not on or "no-store" in directives or (isinstance(n, int) and n > 1):
            return Lookup("bypass")
        key = cache_key(
            api=api, namespace=namespace, model=model, targets=targets, chat=chat, native=native
        )
        lookup = Lookup("miss", key, _ttl_of(headers, ttl))
        if "no-cache" in directives:
            lookup.result = "bypass"  # asked not to be answered from the cache; still stored
            return lookup
        answer = await self._get(key)
        if answer is None:
            pending = self._inflight.get(key)
            if pending is None:  # no await since the check: one leader per key
                lookup.leader = self._inflight[key] = asyncio.get_running_loop().create_future()
                if semantic and self.semantic is not None:
                    asked = Asked(api, namespace, model, targets, chat, native)
                    try:
                        await self._ask_semantic(lookup, asked)
                    except BaseException:  # the client left while its question was embedded
                        self.abandon(lookup)  # the caller never got the lookup to abandon
                        raise
                return lookup
            answer = await self._wait_for(pending)
        if answer is not None:
            lookup.result, lookup.answer, lookup.store = "hit", answer, False
        return lookup

    async def _ask_semantic(self, lookup: Lookup, asked: Asked) -> None:
        """The leader of an exact miss asks the semantic index: a near enough question's
        answer is its hit (and its waiters'); else its vector is kept for its answer."""
        search = self.semantic
        assert search is not None
        question = search.question(asked)
        if question is None:
            return
        bucket, text = question
        vector = await search.embed(text)
        if vector is None:
            return
        lookup.bucket, lookup.vector = bucket, vector
        found = await search.nearest(bucket, vector)
        if found is None:
            return
        answer = await self._get(found[0])
        if answer is None:  # its entry expired or was evicted first
            await search.forget(found[0])
            return
        lookup.result, lookup.answer, lookup.store = "hit", answer, False
        lookup.similarity = found[1]
        self.abandon(lookup, answer)

    async def _get(self, key: str) -> CachedAnswer | None:
        try:
            raw = await self.store.get(key)
        except StoreError as exc:
            log.warning("response cache lookup failed (a miss): %s", type(exc).__name__)
            return None
        return entries.decode(raw) if raw is not None else None

    async def _wait_for(self, pending: asyncio.Future[CachedAnswer | None]) -> CachedAnswer | None:
        """The answer of the request of this process already upstream for this key, if it
        comes within `wait_s` (None: go upstream)."""
        if self._wait_s <= 0:
            return None
        try:
            return await asyncio.wait_for(asyncio.shield(pending), self._wait_s)
        except TimeoutError:
            return None

    async def finish(self, lookup: Lookup, answer: CachedAnswer | None) -> None:
        """The request ended: `answer` is its complete answer (None: nothing to keep). Its
        waiters are answered first, then it is stored."""
        leader = lookup.leader
        if leader is not None:
            lookup.leader = None
            if self._inflight.get(lookup.key or "") is leader:
                del self._inflight[lookup.key or ""]
            if not leader.done():
                leader.set_result(answer)
        if answer is None or not lookup.store or lookup.key is None:
            return
        data = entries.encode(answer)
        if len(data) > self.config.max_entry_bytes:
            return
        try:
            await self.store.put(lookup.key, data, lookup.ttl_s)
        except StoreError as exc:
            log.warning("response cache store failed (not kept): %s", type(exc).__name__)
            return
        if self.semantic is not None and lookup.bucket is not None:
            await self.semantic.keep(lookup.bucket, lookup.key, lookup.vector, lookup.ttl_s)

    def abandon(self, lookup: Lookup, answer: CachedAnswer | None = None) -> None:
        """The request ended without `finish` (cancelled: its waiters go upstream), or was
        answered without going upstream (`answer`: theirs too)."""
        leader = lookup.leader
        if leader is not None:
            lookup.leader = None
            if self._inflight.get(lookup.key or "") is leader:
                del self._inflight[lookup.key or ""]
            if not leader.done():
                leader.set_result(answer)

    async def close(self) -> None:
        await self.store.close()
        if self.semantic is not None:
            await self.semantic.close()


def stamped(answer: CachedAnswer, **facts: Any) -> CachedAnswer:
    """`answer` with who served it and what it cost (`provider`, `cost_nanos`, ...)."""
    return msgspec.structs.replace(answer, stored_at=time.time(), **facts)
