"""The `cache` section of the config and the per-model `cache` override, with their rules.

`mode: off` is the default: nothing of the cache is built and the request path pays one
`is None` check. `store: sqlite | redis` use `cache.url`, else the gateway's `store.url` when
it is of that kind; `store: memory` is this process's own. Memory and sqlite are bounded by
`max_bytes`; redis by its own `maxmemory`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal

import msgspec

Mode = Literal["off", "exact", "semantic"]
Problem = tuple[tuple[str | int, ...], str]

STORE_SCHEMES = {"sqlite": ("sqlite:///",), "redis": ("redis://", "rediss://")}


class SemanticConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """`cache.semantic`: how `mode: semantic` finds a stored answer to a question asked in
    other words (docs/cache.md, "Semantic mode")."""

    embedding_model: str  # one of this config's models, served by /v1/embeddings' providers
    threshold: float = 0.95  # the least cosine similarity that is a hit
    max_entries: int = 10_000  # vectors kept in all (the oldest go first)


class CacheConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The response cache, for every model that does not override it."""

    mode: Mode = "off"
    ttl_s: float = 3600.0  # an entry's lifetime (x-gateway-cache-ttl sets one entry's)
    max_entry_bytes: int = 1_048_576  # an answer larger than this (encoded) is not stored
    store: Literal["memory", "sqlite", "redis"] = "sqlite"
    url: str | None = None  # sqlite:///PATH or redis://...; None: store.url (same kind)
    max_bytes: int = 256 * 1_048_576  # memory and sqlite stores' bound (stored bytes)
    namespace: Literal["key", "shared"] = "key"  # key: each virtual key its own entries
    # how long an identical request waits for one already upstream before going itself
    wait_s: float = 30.0
    semantic: SemanticConfig | None = None  # required by mode: semantic (here or per model)


class ModelCache(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A model's own cache settings (`models[].cache`); None fields take the global ones."""

    mode: Mode | None = None
    ttl_s: float | None = None


def cache_problems(
    cache: CacheConfig,
    overrides: list[tuple[int, ModelCache | None]],
    store_url: str,
    model_names: frozenset[str] = frozenset(),
) -> Iterator[Problem]:
    """Every problem of the cache settings, with its path (`overrides`: (model index, its
    `cache`))."""
    here = ("cache",)
    if cache.ttl_s <= 0:
        yield (*here, "ttl_s"), "must be more than 0 seconds"
    if cache.max_entry_bytes <= 0:
        yield (*here, "max_entry_bytes"), "must be more than 0"
    if cache.max_bytes < cache.max_entry_bytes:
        yield (*here, "max_bytes"), "must be at least max_entry_bytes"
    if cache.wait_s < 0:
        yield (*here, "wait_s"), "must be 0 or more seconds"
    modes = {cache.mode} | {o.mode for _, o in overrides if o is not None and o.mode}
    if "semantic" in modes:
        yield from _semantic_problems(cache, model_names)
    if cache.store != "memory" and modes - {"off"}:
        url = cache.url or store_url
        schemes = STORE_SCHEMES[cache.store]
        if not url.startswith(schemes):
            where = "cache.url" if cache.url else "store.url"
            yield (
                (*here, "url" if cache.url else "store"),
                f"store {cache.store} needs a {' or '.join(schemes)} URL ({where} is not one);"
                " set cache.url, or store: memory",
            )
    for index, override in overrides:
        if override is not None and override.ttl_s is not None and override.ttl_s <= 0:
            yield ("models", index, "cache", "ttl_s"), "must be more than 0 seconds"


def _semantic_problems(cache: CacheConfig, model_names: frozenset[str]) -> Iterator[Problem]:
    here = ("cache", "semantic")
    semantic = cache.semantic
    if semantic is None:
        yield here, "mode semantic needs cache.semantic: {embedding_model: <a model>}"
        return
    if semantic.embedding_model not in model_names:
        yield (
            (*here, "embedding_model"),
            f"'{semantic.embedding_model}' is not one of models[].name",
        )
    if not 0.0 < semantic.threshold <= 1.0:
        yield (*here, "threshold"), "must be more than 0 and at most 1"
    if semantic.max_entries < 1:
        yield (*here, "max_entries"), "must be at least 1"
