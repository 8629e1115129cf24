"""Semantic mode on the request path: the question a request asks (its bucket and the text
to embed), its embedding (through the gateway's own providers: `embedder`, set once the
gateway's state exists, gateway/server/cache_embedder.py), the nearest stored question in its
bucket, and the vectors of answers kept.

Built only when some model's cache is semantic (gateway/cache/build.py); numpy comes with it.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable
from collections.abc import Callable
from typing import TYPE_CHECKING

from gateway.cache.config import SemanticConfig
from gateway.cache.semantic import Matrix
from gateway.cache.semantic import context_key
from gateway.cache.semantic import last_user_text
from gateway.cache.vectors import Found
from gateway.cache.vectors import VectorIndex
from gateway.store.kv import StoreError

if TYPE_CHECKING:
    from gateway.cache.service import Asked

log = logging.getLogger("gateway.cache")

Embedder = Callable[[str], Awaitable[Matrix | None]]


class SemanticSearch:
    def __init__(self, config: SemanticConfig, index: VectorIndex) -> None:
        self.threshold = config.threshold
        self.embedding_model = config.embedding_model
        self.index = index
        self.embedder: Embedder | None = None

    def question(self, asked: Asked) -> tuple[str, str] | None:
        """The request's bucket and the text that stands for it; None: exact only."""
        turn = last_user_text(asked.chat)
        if turn is None:
            return None
        at, text = turn
        return context_key(**asked._asdict(), turn=at), text

    async def embed(self, text: str) -> Matrix | None:
        if self.embedder is None:
            return None
        return await self.embedder(text)

    async def nearest(self, bucket: str, vector: Matrix) -> Found | None:
        """The stored question closest to `vector` if it is within the threshold."""
        try:
            found = await self.index.search(bucket, vector)
        except StoreError as exc:
            log.warning("response cache: semantic search failed (a miss): %s", type(exc).__name__)
            return None
        if found is None or found[1] < self.threshold:
            return None
        return found

    async def keep(self, bucket: str, key: str, vector: Matrix, ttl_s: float) -> None:
        try:
            await self.index.add(bucket, key, vector, ttl_s)
        except StoreError as exc:
            log.warning("response cache: vector not kept: %s", type(exc).__name__)

    async def forget(self, key: str) -> None:
        with contextlib.suppress(StoreError):  # it goes with its bucket's next prune
            await self.index.drop(key)

    async def close(self) -> None:
        await self.index.close()
