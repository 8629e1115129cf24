"""The configuration: its Structs, loading a file, the built-in default, `check-config`.

Owns the schema of the YAML config file (docs/configuration.md is its reference) and the
public entry points: `parse_config`, `load_config`, `default_config`, `check_config`,
`effective_base_url`. Reading YAML, interpolating `${VAR}` and converting field by field live in
`config_parse`; the semantic rules live in `config_check`. A provider's config is its kind's
own Struct (gateway/providers/<kind>/config.py, on `config_base.ProviderBase`), decoded from
the union in providers/registry.py. A config is immutable once loaded; nothing here keeps
state between calls.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from typing import Literal
from typing import TextIO

import msgspec

from gateway import config_check
from gateway import config_convert
from gateway import config_parse
from gateway.cache.config import CacheConfig
from gateway.cache.config import ModelCache
from gateway.cache.config import cache_problems

# re-exported: the rest of the gateway reads these names from here
from gateway.config_base import ProviderBase as ProviderBase
from gateway.config_base import ProviderKey as ProviderKey
from gateway.config_base import Secret as Secret
from gateway.config_base import Timeouts as Timeouts
from gateway.config_base import effective_base_url as effective_base_url
from gateway.config_console import ConsoleConfig
from gateway.config_console import console_problems
from gateway.config_observe import RequestLogConfig
from gateway.config_observe import TracingConfig
from gateway.config_observe import observe_problems
from gateway.providers.registry import ProviderConfig as ProviderConfig
from gateway.providers.registry import default_providers


class LimitsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What one request may carry and how many may run at once (docs/api.md, "Limits")."""

    max_header_bytes: int = 8190  # one header line (request line included); over: 431
    max_messages: int = 2048  # messages (chat, Messages) or input items (Responses)
    max_tools: int = 512
    max_tool_argument_bytes: int = 1048576  # one tool call's arguments in the history
    # inference requests in flight, per process; over: 503. None: what the process's
    # descriptor limit and its share of the container's memory limit can hold
    # (server/limits.py `derived_stream_limit`)
    max_concurrent_streams: int | None = None
    # per virtual key (bearer), per process; over: 429. None: no per-key cap
    max_concurrent_streams_per_key: int | None = None


class ServerConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The HTTP listener, stream pacing and request limits."""

    host: str = "127.0.0.1"
    port: int = 8080
    workers: int = 1
    max_body_bytes: int = 10485760
    shutdown_grace_s: float = 30.0  # how long a SIGTERM drain waits for open streams
    commit_after_s: float = 5.0  # commit (send headers) after this long without content
    keepalive_s: float = 15.0  # `: keep-alive` comment interval on a silent committed stream
    client_write_timeout_s: float = 30.0  # a client that reads nothing this long is cut off
    client_header_timeout_s: float = 10.0  # a request head (line and headers) must arrive within
    client_body_timeout_s: float = 60.0  # a request body must arrive within, once its head has
    limits: LimitsConfig = LimitsConfig()


class LoggingConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What the gateway logs (docs/operations.md, "Logs"); everything goes to stderr."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["text", "json"] = "text"  # of every line but the access log's
    access_log: bool = True  # one JSON line per request on logger `gateway.access` (info)


class RoutingConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Failover and retries across targets and keys."""

    strategy: Literal["weighted", "least_inflight", "latency"] = "weighted"
    max_attempts: int = 4  # upstream attempts per request, over all keys and targets
    deadline_s: float = 600.0  # whole request, over all attempts
    cooldown_s: float = 30.0  # a rate-limited key rests this long without Retry-After
    circuit_failures: int = 5  # consecutive server-side failures that open a key's circuit
    circuit_open_s: float = 5.0  # first open period; doubles on each re-open
    circuit_max_open_s: float = 30.0  # the longest open period (a flapping key is re-tested soon)
    auth_hold_s: float = 600.0  # a key answered 401/403 is out of rotation this long, then probed
    circuit_probe: bool = True  # the gateway probes an open circuit when its period ends
    # a transient failure (5xx, reset, 429) tried again on the same target this many times
    retries_per_target: int = 1
    max_retry_wait_s: float = 5.0  # the longest Retry-After waited out instead of moving on


class AuthConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Who may use the gateway; an empty master key means an open gateway."""

    master_key: Secret = Secret("")


class StoreConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Where budgets, rate-limit windows, key health and virtual keys live."""

    url: str = "sqlite:///./gateway.db"  # memory:// | sqlite:///PATH | redis[s]://HOST:PORT/DB
    responses_ttl_s: float = 30 * 24 * 3600.0  # how long /v1/responses keeps a response

    def __repr__(self) -> str:
        # A redis URL may carry a password: never show the userinfo.
        scheme, sep, rest = self.url.partition("://")
        netloc, slash, tail = rest.partition("/")
        if sep and "@" in netloc:
            rest = "***@" + netloc.rpartition("@")[2] + slash + tail
        return f"StoreConfig(url={scheme + sep + rest!r})"


class Price(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """USD per million tokens; overrides the shipped price table for a model."""

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None  # None: cached prompt tokens cost as input
    reasoning_output_per_mtok: float | None = None  # None: reasoning tokens cost as output


class Target(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One place a model can be served from: a provider and its upstream model id."""

    provider: str
    model: str
    priority: int = 0  # lower is tried first; equal priorities are balanced by weight
    weight: int = 1
    api: Literal["chat", "responses"] = "chat"
    # tokens the upstream model takes (None: the shipped table's, if it knows the model)
    context_window: int | None = None


class ModelFallbacks(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """Other configured models a request moves to when every larger target failed."""

    # after a context-length error: these models' targets, in order
    context_window: list[str] = msgspec.field(default_factory=list)


class Recovery(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What a stream that breaks after content was sent does (docs/routing.md)."""

    # continue: the next target that can continue an answer gets the text already sent as
    # a prefill and the client's stream goes on; off: the stream ends with an error event
    mode: Literal["off", "continue"] = "off"
    max_continuations: int = 2  # breaks one stream may be continued after


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A model name clients may send, and the targets that serve it."""

    name: str
    targets: list[Target]
    tools: Literal["native", "emulate"] = "native"
    price: Price | None = None
    cache: ModelCache | None = None  # None: the global `cache` settings
    fallbacks: ModelFallbacks | None = None
    recovery: Recovery | None = None  # None: off


class VirtualKeyConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A static virtual key for clients, with optional budget, rate limits and model list."""

    name: str
    key: Secret
    budget_usd: float | None = None
    budget_period: Literal["none", "total", "daily", "weekly", "monthly"] = "total"  # none = total
    rpm: int | None = None
    tpm: int | None = None
    models: list[str] | None = None  # None: every model


class Config(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The whole configuration file."""

    server: ServerConfig = msgspec.field(default_factory=ServerConfig)
    routing: RoutingConfig = msgspec.field(default_factory=RoutingConfig)
    auth: AuthConfig = msgspec.field(default_factory=AuthConfig)
    store: StoreConfig = msgspec.field(default_factory=StoreConfig)
    logging: LoggingConfig = msgspec.field(default_factory=LoggingConfig)
    providers: list[ProviderConfig] = []
    models: list[ModelConfig] = []
    keys: list[VirtualKeyConfig] = []
    request_log: RequestLogConfig | None = None  # None: no request log
    tracing: TracingConfig | None = None  # None: no traces
    cache: CacheConfig = msgspec.field(default_factory=CacheConfig)  # the response cache
    console: ConsoleConfig = msgspec.field(default_factory=ConsoleConfig)  # the /ui/ console


class ConfigError(Exception):
    """A config that cannot be used; `.problems` lists every problem as `"<path>: <message>"`."""

    def __init__(self, problems: list[str], source: str = "<config>") -> None:
        self.problems = problems
        self.source = source
        count = f"{len(problems)} problem{'' if len(problems) == 1 else 's'}"
        super().__init__("\n  ".join([f"{count} in {source}:", *problems]))


def _dec_hook(tp: type, value: Any) -> Any:
    if tp is Secret:
        if isinstance(value, str):
            return Secret(value)
        raise ValueError(f"expected str, got {config_parse.kind_of(value)}")
    raise NotImplementedError(f"no conversion to {tp!r}")


def _raw_names(tree: Any, section: str) -> frozenset[str]:
    items = tree.get(section) if isinstance(tree, dict) else None
    if not isinstance(items, list):
        return frozenset()
    return frozenset(
        item["name"]
        for item in items
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    )


def parse_config(text: str, env: Mapping[str, str], source: str = "<config>") -> Config:
    """Parse, interpolate and validate a YAML config; raises ConfigError with every problem."""
    tree = config_parse.read_tree(text, env)
    problems = tree.problems
    config = config_parse.BAD
    if not config_parse.is_bad(tree.value):
        config = config_convert.convert(tree.value, Config, (), problems, _dec_hook)
    if isinstance(config, Config):
        # Semantic rules run on what did convert; a rule about a part that already has a
        # problem (or whose parent or child does) would only repeat it.
        reported = [path for path, _ in problems]
        problems.extend(
            (path, message)
            for path, message in config_check.check(
                config,
                provider_names=_raw_names(tree.value, "providers"),
                model_names=_raw_names(tree.value, "models"),
            )
            if not any(_related(path, other) for other in reported)
        )
        problems.extend(observe_problems(config.request_log, config.tracing, config.store.url, env))
        if isinstance(config.console, ConsoleConfig):
            problems.extend(console_problems(config.console))
        overrides = [
            (i, m.cache) for i, m in enumerate(config.models) if isinstance(m, ModelConfig)
        ]
        if isinstance(config.cache, CacheConfig):
            problems.extend(
                cache_problems(
                    config.cache,
                    overrides,
                    config.store.url,
                    frozenset(m.name for m in config.models if isinstance(m, ModelConfig)),
                )
            )
    if problems or not isinstance(config, Config):
        ordered = config_parse.in_file_order(problems, tree.positions)
        raise ConfigError([config_parse.format_problem(p, source) for p in ordered], source)
    return config


def _related(a: config_parse.Path, b: config_parse.Path) -> bool:
    n = min(len(a), len(b))
    return a[:n] == b[:n]


def load_config(path: str | Path, env: Mapping[str, str] | None = None) -> Config:
    """Read and parse a config file; a file that cannot be read is a ConfigError too."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{source}: no such file"], source) from None
    except UnicodeDecodeError:
        raise ConfigError([f"{source}: not UTF-8 text"], source) from None
    except OSError as exc:
        raise ConfigError([f"{source}: cannot read: {exc.strerror}"], source) from None
    return parse_config(text, os.environ if env is None else env, source)


def default_config(env: Mapping[str, str]) -> Config:
    """The config served without a file: the built-in mock model, plus a provider per API
    key in env (each kind's `env_key`, docs/configuration.md).

    Those providers are named after their kind and are reachable as `"<provider>/<model>"`;
    the store is sqlite in the working directory.
    """
    providers = default_providers(env)
    models = [
        ModelConfig(name=model, targets=[Target(provider=p.name, model=model)])
        for p in providers
        if (model := p.default_model) is not None
    ]
    return Config(
        store=StoreConfig(url="sqlite:///./gateway.db"),
        providers=providers,
        models=models,
    )


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def check_config(path: str, out: TextIO, env: Mapping[str, str] | None = None) -> int:
    """`gateway check-config PATH`: print `ok: ...` and return 0, or every problem and 1."""
    try:
        config = load_config(path, env)
    except ConfigError as exc:
        for problem in exc.problems:
            print(problem, file=out)
        print(f"{_plural(len(exc.problems), 'problem')} in {path}", file=out)
        return 1
    counts = ", ".join(
        [
            _plural(len(config.providers), "provider"),
            _plural(len(config.models), "model"),
            _plural(len(config.keys), "key"),
        ]
    )
    print(f"ok: {path}: {counts}", file=out)
    return 0
