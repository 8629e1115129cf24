"""The configuration: its Structs, loading a file, the built-in default, `check-config`.

Owns the schema of the YAML config file (docs/configuration.md is its reference) and the
public entry points: `parse_config`, `load_config`, `default_config`, `check_config`,
`effective_base_url`. Reading YAML, interpolating `${VAR}` and converting field by field live in
`config_parse`; the semantic rules live in `config_check`. A config is immutable once loaded;
nothing here keeps state between calls. Imports nothing from the rest of the gateway.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, TextIO

import msgspec

from gateway import config_check, config_parse


class Secret:
    """A credential whose repr and str hide it; `.reveal()` is the only way to read it.

    Compares (in constant time) and hashes on the value, is truthy when non-empty, and is
    never quoted in an error message.
    """

    __slots__ = ("_value",)
    _value: str

    def __init__(self, value: str) -> None:
        object.__setattr__(self, "_value", value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Secret is immutable")

    def reveal(self) -> str:
        """The secret value itself: only for the one place that sends it upstream."""
        return self._value

    def __repr__(self) -> str:
        return "Secret('***')" if self._value else "Secret('')"

    __str__ = __repr__

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Secret):
            return NotImplemented
        return hmac.compare_digest(self._value.encode(), other._value.encode())

    def __hash__(self) -> int:
        return hash(self._value)

    def __reduce__(self) -> tuple[type[Secret], tuple[str]]:
        return (Secret, (self._value,))


class LimitsConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """What one request may carry and how many may run at once (docs/api.md, "Limits")."""

    max_header_bytes: int = 8190  # one header line (request line included); over: 431
    max_messages: int = 2048  # messages (chat, Messages) or input items (Responses)
    max_tools: int = 512
    max_tool_argument_bytes: int = 1048576  # one tool call's arguments in the history
    max_concurrent_streams: int = 1024  # inference requests in flight, per process; over: 503
    max_concurrent_streams_per_key: int = 256  # per virtual key (bearer), per process; over: 429


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
    circuit_max_open_s: float = 300.0  # the longest open period
    auth_hold_s: float = 600.0  # a key answered 401/403 is out of rotation this long, then probed


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


class ProviderKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """One credential of a provider; a provider's keys are balanced by weight."""

    key: Secret | None = None
    name: str | None = None  # shown by /admin/health and in logs instead of a fingerprint
    weight: int = 1
    rpm: int | None = None
    tpm: int | None = None
    aws_access_key_id: Secret | None = None  # bedrock SigV4
    aws_secret_access_key: Secret | None = None
    aws_session_token: Secret | None = None
    credentials_file: str | None = None  # vertex: a service account JSON file


class Timeouts(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The named timeouts of one upstream attempt, in seconds."""

    connect_s: float = 5.0
    first_byte_s: float = 60.0
    idle_s: float = 60.0  # longest silence between two upstream bytes
    total_s: float = 600.0


class MockOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The shape of the mock provider's stream."""

    chunks: int = 12
    delay_s: float = 0.0  # between chunks


ProviderKind = Literal[
    "openai", "azure", "anthropic", "gemini", "vertex", "bedrock", "ollama", "mock"
]


class ProviderConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """An upstream: its kind (which adapter speaks to it), where it is, and its keys."""

    name: str
    kind: ProviderKind
    base_url: str | None = None
    keys: list[ProviderKey] = []
    timeouts: Timeouts = Timeouts()
    region: str | None = None  # bedrock, vertex
    project: str | None = None  # vertex
    api_version: str | None = None  # azure
    mock: MockOptions | None = None  # mock
    # client image/file URLs other than http(s) and data: (gs://, s3://...) are read with the
    # gateway's cloud identity: refused unless the operator allows them for this provider
    allow_storage_uris: bool = False


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


class ModelConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """A model name clients may send, and the targets that serve it."""

    name: str
    targets: list[Target]
    tools: Literal["native", "emulate"] = "native"
    price: Price | None = None


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
        config = config_parse.convert(tree.value, Config, (), problems, _dec_hook)
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


_DEFAULT_BASE_URLS: Mapping[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
    "bedrock": "https://bedrock-runtime.{region}.amazonaws.com",
    "vertex": "https://{region}-aiplatform.googleapis.com",
    "ollama": "http://localhost:11434",
    "mock": "mock://",
}


def effective_base_url(p: ProviderConfig) -> str:
    """The provider's `base_url` without a trailing slash, else its kind's SDK default.

    Raises ValueError for an azure provider without base_url, or a bedrock or vertex provider
    without region (a validated config has them).
    """
    if p.base_url:
        return p.base_url.rstrip("/")
    if p.kind == "azure":
        raise ValueError(f"provider {p.name!r}: azure needs a base_url")
    if p.kind in ("bedrock", "vertex") and not p.region:
        raise ValueError(f"provider {p.name!r}: {p.kind} needs a region")
    if p.kind == "vertex" and p.region == "global":
        return "https://aiplatform.googleapis.com"  # the global endpoint has no region prefix
    return _DEFAULT_BASE_URLS[p.kind].format(region=p.region)


_ENV_PROVIDERS: tuple[tuple[ProviderKind, str], ...] = (
    ("openai", "OPENAI_API_KEY"),
    ("anthropic", "ANTHROPIC_API_KEY"),
    ("gemini", "GEMINI_API_KEY"),
)


def default_config(env: Mapping[str, str]) -> Config:
    """The config served without a file: the mock model, plus a provider per API key in env.

    Those providers are named after their kind (`openai`, `anthropic`, `gemini`) and are
    reachable as `"<provider>/<model>"`; the store is sqlite in the working directory.
    """
    providers = [ProviderConfig(name="mock", kind="mock")]
    for kind, variable in _ENV_PROVIDERS:
        if value := env.get(variable):
            providers.append(
                ProviderConfig(name=kind, kind=kind, keys=[ProviderKey(key=Secret(value))])
            )
    return Config(
        store=StoreConfig(url="sqlite:///./gateway.db"),
        providers=providers,
        models=[ModelConfig(name="mock", targets=[Target(provider="mock", model="mock")])],
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
