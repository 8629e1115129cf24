"""The cache of a config: None when no model caches (the request path then checks for None
and does nothing else)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gateway.cache.service import ResponseCache
from gateway.cache.store import make_store
from gateway.store.kv import KeyValueStore

if TYPE_CHECKING:
    from gateway.config import Config


def build_cache(config: Config, kv: KeyValueStore) -> ResponseCache | None:
    models = {m.name: m.cache for m in config.models}
    modes = {config.cache.mode} | {c.mode for c in models.values() if c is not None and c.mode}
    if modes <= {"off"}:
        return None
    store = make_store(config.cache, config.store.url, kv)
    semantic = None
    if "semantic" in modes and config.cache.semantic is not None:
        from gateway.cache.semantic_search import SemanticSearch
        from gateway.cache.vectors import make_index

        index = make_index(config.cache, config.store.url, config.cache.semantic.max_entries)
        semantic = SemanticSearch(config.cache.semantic, index)
    return ResponseCache(
        config.cache, models, store, deadline_s=config.routing.deadline_s, semantic=semantic
    )
