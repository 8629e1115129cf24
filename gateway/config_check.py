"""The semantic rules of the config: what a well-typed config must also satisfy to be served.

Owns every cross-field and cross-section rule (unique names, targets naming providers, a
target's `api` against what its provider's kind speaks, ranges, URL shapes); the fields and
credentials a provider kind needs are its own config class's `problems()`. `check` returns every
problem as `(path, message)` and raises nothing. It may be given a partially converted config
(parts that failed to convert are `config_parse.BAD` and are skipped), so it reports what it can
alongside the type errors. Imports from the gateway only `config_parse`, `config_base` and
the provider registry (and `config` for types).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Set
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import Secret
from gateway.config_base import split_proxy_url
from gateway.config_parse import Path
from gateway.config_parse import Problem
from gateway.config_parse import is_bad
from gateway.providers.registry import kinds_speaking
from gateway.store.redis_url import cluster_seeds
from gateway.store.redis_url import is_cluster_url

if TYPE_CHECKING:
    from gateway.config import Config
    from gateway.config import ModelConfig
    from gateway.config import ProviderConfig
    from gateway.config import StoreConfig
    from gateway.config import VirtualKeyConfig
    from gateway.config_base import ProviderKey

_STORE_FORMS = (
    "memory://, sqlite:///PATH, redis://HOST:PORT/DB, rediss://HOST:PORT/DB or "
    "redis+cluster://HOST:PORT[,HOST:PORT...]"
)


def check(
    config: Config, *, provider_names: Set[str] = frozenset(), model_names: Set[str] = frozenset()
) -> list[Problem]:
    """Every semantic problem of `config`, section by section.

    `provider_names` and `model_names` are names known from the raw file: a target naming a
    provider that failed to convert is not also reported as naming an unknown provider.
    """
    providers = [p for p in config.providers if not is_bad(p)]
    models = [m for m in config.models if not is_bad(m)]
    kinds = {p.name: p for p in providers}
    known_providers = provider_names | kinds.keys()
    return [
        *_check_server(config),
        *_check_store(config.store),
        *_check_providers(config.providers),
        *_check_models(config.models, kinds, known_providers),
        *_check_keys(config, model_names | {m.name for m in models}, known_providers),
    ]


def _at_least(value: int | None, minimum: int, path: Path) -> Iterator[Problem]:
    if value is not None and value < minimum:
        yield path, f"must be >= {minimum}"


def _not_negative(value: float | None, path: Path) -> Iterator[Problem]:
    if value is not None and not (math.isfinite(value) and value >= 0):
        yield path, "must be >= 0"


def _durations(struct: msgspec.Struct, path: Path) -> Iterator[Problem]:
    """Every `*_s` field is a duration in seconds and must be a finite number > 0."""
    for field in msgspec.structs.fields(struct):
        value = getattr(struct, field.name)
        if field.name.endswith("_s") and not (math.isfinite(value) and value > 0):
            yield (*path, field.name), "must be > 0"


def _check_server(config: Config) -> Iterator[Problem]:
    server, routing = config.server, config.routing
    if not server.host:
        yield ("server", "host"), "must not be empty"
    if not 0 <= server.port <= 65535:
        yield ("server", "port"), "must be between 0 and 65535"
    yield from _at_least(server.workers, 1, ("server", "workers"))
    yield from _at_least(server.max_body_bytes, 1024, ("server", "max_body_bytes"))
    yield from _durations(server, ("server",))
    limits = server.limits
    yield from _at_least(limits.max_header_bytes, 1024, ("server", "limits", "max_header_bytes"))
    for name in (
        "max_messages",
        "max_tools",
        "max_tool_argument_bytes",
        "max_concurrent_streams",
        "max_concurrent_streams_per_key",
    ):
        yield from _at_least(getattr(limits, name), 1, ("server", "limits", name))
    yield from _at_least(routing.max_attempts, 1, ("routing", "max_attempts"))
    yield from _at_least(routing.circuit_failures, 1, ("routing", "circuit_failures"))
    yield from _at_least(routing.retries_per_target, 0, ("routing", "retries_per_target"))
    if routing.retries_per_target > 10:
        yield ("routing", "retries_per_target"), "must be at most 10"
    yield from _durations(routing, ("routing",))
    if routing.circuit_max_open_s < routing.circuit_open_s:
        yield ("routing", "circuit_max_open_s"), "must be >= routing.circuit_open_s"
    yield from _durations(config.store, ("store",))


def store_url_ok(url: str) -> bool:
    """memory://, sqlite:///PATH, redis[s]://HOST[:PORT][/DB] with an integer DB, or
    redis[s]+cluster://HOST:PORT[,HOST:PORT...] (gateway/store/redis_conn.py)."""
    if url == "memory://":
        return True
    if is_cluster_url(url):
        return cluster_seeds(url) is not None
    if url.startswith("sqlite:///"):
        return len(url) > len("sqlite:///")
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError on a port that is not a number in range
    except ValueError:
        return False
    db = parts.path.removeprefix("/")
    return (
        parts.scheme in ("redis", "rediss")
        and bool(parts.hostname)
        and (db == "" or db.isdigit())
        and not parts.query
        and not parts.fragment
    )


def _check_store(store: StoreConfig) -> Iterator[Problem]:
    # The URL is never quoted: a redis URL may carry a password.
    if not store_url_ok(store.url):
        yield ("store", "url"), f"expected {_STORE_FORMS}"


def _check_name(name: str, seen: set[str], what: str, path: Path) -> Iterator[Problem]:
    if not name:
        yield path, "must not be empty"
    elif name in seen:
        yield path, f"duplicate {what} name '{name}'"
    seen.add(name)


def _check_providers(providers: list[ProviderConfig]) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, p in enumerate(providers):
        if is_bad(p):
            continue
        here: Path = ("providers", i)
        yield from _check_name(p.name, seen, "provider", (*here, "name"))
        if "/" in p.name:
            yield (*here, "name"), "must not contain '/'"
        if p.base_url is not None and not _http_url(p.base_url):
            yield (*here, "base_url"), "must be an http:// or https:// URL"
        # the kind's own rules (its required fields, its credential forms)
        for path, message in p.problems():
            yield (*here, *path), message
        key_names: set[str] = set()
        for j, key in enumerate(p.keys):
            if not is_bad(key):
                yield from _check_key(key, (*here, "keys", j))
                if key.name is not None:
                    at: Path = (*here, "keys", j, "name")
                    yield from _check_name(key.name, key_names, "key", at)
        yield from _durations(p.timeouts, (*here, "timeouts"))
        yield from _check_egress(p, here)


def _check_egress(p: ProviderBase, here: Path) -> Iterator[Problem]:
    """`proxy` is a URL we can use (its message never quotes the credentials) and the `tls`
    files load (docs/egress.md)."""
    if p.proxy is not None and not p.proxy.isprintable():
        # urlsplit drops tabs and line breaks without a word: the password would change
        yield (*here, "proxy"), "contains a line break or control character"
    elif p.proxy is not None and p.proxy.strip().lower() != "none":
        try:
            split_proxy_url(p.proxy)
        except ValueError as exc:
            yield (*here, "proxy"), str(exc)
    if p.tls is not None:
        for path, message in p.tls.problems():
            yield (*here, "tls", *path), message


def _http_url(url: str) -> bool:
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _check_header_safe(key: ProviderKey, here: Path) -> Iterator[Problem]:
    """Secrets travel in HTTP headers: a line break or edge whitespace (the trailing newline
    of a secret file, typically) would corrupt the request. Never quotes the value."""
    for field in msgspec.structs.fields(key):
        secret = getattr(key, field.name)
        if not isinstance(secret, Secret):
            continue
        value = secret.reveal()
        if "\n" in value or "\r" in value:
            yield (*here, field.name), "contains a line break (a trailing newline from a file?)"
        elif value != value.strip():
            yield (*here, field.name), "starts or ends with whitespace"


def _check_key(key: ProviderKey, here: Path) -> Iterator[Problem]:
    yield from _check_header_safe(key, here)
    yield from _at_least(key.weight, 1, (*here, "weight"))
    yield from _at_least(key.rpm, 1, (*here, "rpm"))
    yield from _at_least(key.tpm, 1, (*here, "tpm"))


def _check_models(
    models: list[ModelConfig], kinds: Mapping[str, ProviderBase], provider_names: Set[str]
) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, m in enumerate(models):
        if is_bad(m):
            continue
        here: Path = ("models", i)
        yield from _check_name(m.name, seen, "model", (*here, "name"))
        if not m.targets:
            yield (*here, "targets"), "must have at least one target"
        for j, t in enumerate(m.targets):
            if is_bad(t):
                continue
            at: Path = (*here, "targets", j)
            if t.provider not in provider_names:
                yield (*at, "provider"), f"unknown provider '{t.provider}'"
            if not t.model:
                yield (*at, "model"), "must not be empty"
            yield from _at_least(t.weight, 1, (*at, "weight"))
            yield from _at_least(t.context_window, 1, (*at, "context_window"))
            provider = kinds.get(t.provider)
            if provider is not None and t.api not in provider.apis:
                able = " or ".join(kinds_speaking(t.api))
                yield (*at, "api"), f"{t.api} needs a provider of kind {able}, not {provider.kind}"
        names = {model.name for model in models}
        if m.fallbacks is not None and not is_bad(m.fallbacks):
            for k, name in enumerate(m.fallbacks.context_window):
                at = (*here, "fallbacks", "context_window", k)
                if name == m.name:
                    yield at, "must name another model, not this one"
                elif name not in names:
                    yield at, f"unknown model '{name}'"
        if m.recovery is not None and not is_bad(m.recovery):
            yield from _at_least(
                m.recovery.max_continuations, 1, (*here, "recovery", "max_continuations")
            )
        if m.price is not None:
            for field in (
                "input_per_mtok",
                "output_per_mtok",
                "cached_input_per_mtok",
                "reasoning_output_per_mtok",
            ):
                yield from _not_negative(getattr(m.price, field), (*here, "price", field))


def _check_keys(
    config: Config, model_names: Set[str], provider_names: Set[str]
) -> Iterator[Problem]:
    seen: set[str] = set()
    owners: dict[str, int] = {}  # secret value -> index of the first key using it
    for i, vk in enumerate(config.keys):
        if is_bad(vk):
            continue
        here: Path = ("keys", i)
        yield from _check_name(vk.name, seen, "key", (*here, "name"))
        yield from _check_virtual_key_secret(vk, config, owners, i)
        yield from _not_negative(vk.budget_usd, (*here, "budget_usd"))
        yield from _at_least(vk.rpm, 1, (*here, "rpm"))
        yield from _at_least(vk.tpm, 1, (*here, "tpm"))
        for j, model in enumerate(vk.models or []):
            if not is_bad(model) and not _names_model(model, model_names, provider_names):
                yield (*here, "models", j), f"unknown model '{model}'"


def _check_virtual_key_secret(
    vk: VirtualKeyConfig, config: Config, owners: dict[str, int], i: int
) -> Iterator[Problem]:
    # The messages say which entries clash, never the value.
    path: Path = ("keys", i, "key")
    value = vk.key.reveal()
    if not value:
        yield path, "must not be empty"
        return
    if value in owners:
        yield path, f"same key as keys[{owners[value]}]"
    else:
        owners[value] = i
    if vk.key == config.auth.master_key:
        yield path, "same as auth.master_key"


def _names_model(name: str, model_names: Set[str], provider_names: Set[str]) -> bool:
    if name in model_names:
        return True
    provider, slash, model = name.partition("/")
    return bool(slash and model) and provider in provider_names
