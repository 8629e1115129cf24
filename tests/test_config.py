"""Config loading: the DESIGN example, every problem with its path, interpolation, secrets,
the built-in default, effective base URLs and `check-config` output."""

from __future__ import annotations

import copy
import io
import pickle
import re
import textwrap
from pathlib import Path

import msgspec
import pytest

from gateway.config import Config
from gateway.config import ConfigError
from gateway.config import ModelConfig
from gateway.config import ProviderBase
from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Secret
from gateway.config import StoreConfig
from gateway.config import Target
from gateway.config import check_config
from gateway.config import default_config
from gateway.config import effective_base_url
from gateway.config import load_config
from gateway.config import parse_config
from gateway.config_parse import format_path
from gateway.config_parse import interpolate
from gateway.providers.registry import provider_config

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"

# DESIGN.md §4, verbatim. It names an `anthropic` provider it does not define.
DESIGN_EXAMPLE = """\
server:   {host: 127.0.0.1, port: 8080, workers: 1, max_body_bytes: 10485760, shutdown_grace_s: 30,
           commit_after_s: 5, keepalive_s: 15}
routing:  {strategy: weighted, max_attempts: 4, deadline_s: 600, cooldown_s: 30}
auth:     {master_key: "${GATEWAY_MASTER_KEY:-}"}   # empty: open gateway, logged as a warning
store:    {url: "sqlite:///./gateway.db"}          # memory:// | sqlite:///path | redis://host:port/db
providers:
  - name: openai                   # referenced by models and by "provider/model" addressing
    kind: openai                   # openai | azure | anthropic | gemini | vertex | bedrock | ollama | mock
    base_url: https://api.openai.com/v1            # every kind accepts a base_url override
    keys:                          # balanced by weight; a key in cooldown or over its rpm is skipped
      - {key: "${OPENAI_API_KEY}", weight: 3, rpm: 10000}
      - {key: "${OPENAI_API_KEY_2}", weight: 1}
    timeouts: {connect_s: 5, first_byte_s: 60, idle_s: 60, total_s: 600}
models:
  - name: smart                    # what clients send as "model"
    targets:                       # same priority: balanced; on failure: the rest, then next priority
      - {provider: openai, model: gpt-4.1, priority: 0}
      - {provider: anthropic, model: claude-sonnet-4-5, priority: 1}
    tools: native                  # native | emulate (prompted tool calls for models without tools)
    price: {input_per_mtok: 2.0, output_per_mtok: 8.0}   # overrides the shipped price table
keys:                              # static virtual keys, besides those made with the admin API
  - {name: ci-bot, key: "${CI_BOT_KEY}", budget_usd: 5.00, rpm: 60, models: [smart]}
"""  # noqa: E501 (verbatim)
ANTHROPIC_PROVIDER = """\
  - name: anthropic
    kind: anthropic
    keys: [{key: "${ANTHROPIC_API_KEY}"}]
"""
DESIGN_ENV = {
    "OPENAI_API_KEY": "sk-openai-one-0001",
    "OPENAI_API_KEY_2": "sk-openai-two-0002",
    "ANTHROPIC_API_KEY": "sk-ant-0003",
    "CI_BOT_KEY": "vk-ci-bot-0004",
    "GATEWAY_MASTER_KEY": "master-0005",
}
ALL_SECRETS = list(DESIGN_ENV.values())


def design_example_complete() -> str:
    return DESIGN_EXAMPLE.replace("models:\n", ANTHROPIC_PROVIDER + "models:\n", 1)


def problems_of(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(textwrap.dedent(text), env or {})
    return info.value.problems


# --- the DESIGN example --------------------------------------------------------------------


def test_design_example_verbatim_lacks_only_the_anthropic_provider() -> None:
    assert problems_of(DESIGN_EXAMPLE, DESIGN_ENV) == [
        "models[0].targets[1].provider: unknown provider 'anthropic'"
    ]


def test_design_example_parses() -> None:
    config = parse_config(design_example_complete(), DESIGN_ENV)
    assert config.server.port == 8080
    assert config.server.shutdown_grace_s == 30.0
    assert config.routing.deadline_s == 600.0
    assert config.auth.master_key.reveal() == "master-0005"
    assert config.store.url == "sqlite:///./gateway.db"
    openai, anthropic = config.providers
    assert (openai.name, openai.kind, anthropic.kind) == ("openai", "openai", "anthropic")
    assert [k.key.reveal() for k in openai.keys if k.key] == [
        "sk-openai-one-0001",
        "sk-openai-two-0002",
    ]
    assert [(k.weight, k.rpm) for k in openai.keys] == [(3, 10000), (1, None)]
    assert openai.timeouts.first_byte_s == 60.0
    (smart,) = config.models
    assert [(t.provider, t.model, t.priority) for t in smart.targets] == [
        ("openai", "gpt-4.1", 0),
        ("anthropic", "claude-sonnet-4-5", 1),
    ]
    assert smart.price is not None
    assert smart.price.output_per_mtok == 8.0
    (bot,) = config.keys
    assert (bot.name, bot.budget_usd, bot.rpm, bot.models) == ("ci-bot", 5.0, 60, ["smart"])
    assert bot.budget_period == "total"


def test_design_example_without_env_names_every_missing_variable() -> None:
    assert problems_of(design_example_complete(), {"GATEWAY_MASTER_KEY": ""}) == [
        "providers[0].keys[0].key: environment variable OPENAI_API_KEY is not set",
        "providers[0].keys[1].key: environment variable OPENAI_API_KEY_2 is not set",
        "providers[1].keys[0].key: environment variable ANTHROPIC_API_KEY is not set",
        "keys[0].key: environment variable CI_BOT_KEY is not set",
    ]


def test_empty_file_is_all_defaults() -> None:
    assert parse_config("", {}) == Config()
    assert parse_config("# only a comment\n", {}) == Config()
    config = Config()
    assert (config.server.host, config.server.port, config.server.max_body_bytes) == (
        "127.0.0.1",
        8080,
        10485760,
    )
    assert (config.routing.max_attempts, config.routing.cooldown_s) == (4, 30.0)
    assert config.store.url == "sqlite:///./gateway.db"
    assert not config.auth.master_key


def test_empty_sections_are_defaults() -> None:
    assert parse_config("server:\nrouting:\nproviders:\nmodels:\nkeys:\n", {}) == Config()


# --- structural problems -------------------------------------------------------------------

STRUCTURAL = [
    ("server: {port: abc}", "server.port: expected int, got str"),
    ("server: {port: 80.5}", "server.port: expected int, got float"),
    ("server: {workers: true}", "server.workers: expected int, got bool"),
    ("server: {keepalive_s: fast}", "server.keepalive_s: expected float, got str"),
    ("server: {nmae: 1}", "server.nmae: unknown field"),
    ("server: [1, 2]", "server: expected mapping, got list"),
    ("servers: {}", "servers: unknown field"),
    (
        "routing: {strategy: random}",
        "routing.strategy: must be one of weighted, least_inflight, latency",
    ),
    ("auth: {master_key: 1234}", "auth.master_key: expected str, got int"),
    ("providers: {name: x}", "providers: expected list, got mapping"),
    ("providers: [{name: x}]", "providers[0].kind: missing required field"),
    (
        "providers: [{name: x, kind: opneai}]",
        "providers[0].kind: must be one of anthropic, azure, bedrock, gemini, mock, "
        "ollama, openai, vertex",
    ),
    (
        "providers: [{name: m, kind: mock, nmae: 1}]",
        "providers[0].nmae: not a field of kind 'mock'",
    ),
    (
        "providers: [{name: m, kind: mock, keys: [{rpm: lots}]}]",
        "providers[0].keys[0].rpm: expected int, got str",
    ),
    (
        "providers: [{name: m, kind: mock, timeouts: {idle: 3}}]",
        "providers[0].timeouts.idle: unknown field",
    ),
    ("models: [{name: m}]", "models[0].targets: missing required field"),
    ("models: [{targets: []}]", "models[0].name: missing required field"),
    (
        "models: [{name: m, targets: [{provider: p}]}]",
        "models[0].targets[0].model: missing required field",
    ),
    ("keys: [{name: k}]", "keys[0].key: missing required field"),
    ("keys: [{name: k, key: abc, models: smart}]", "keys[0].models: expected list, got str"),
    ("- 1", "<config>: expected mapping, got list"),
    ("server: {port: 1}\nserver: {port: 2}", "server: duplicate key (again on line 2)"),
]


@pytest.mark.parametrize(("text", "problem"), STRUCTURAL)
def test_structural_problem(text: str, problem: str) -> None:
    assert problems_of(text) == [problem]


def test_yaml_syntax_error_has_line_and_column() -> None:
    with pytest.raises(ConfigError) as info:
        parse_config("server:\n  port: [8080\n", {}, source="gw.yaml")
    (problem,) = info.value.problems
    assert problem.startswith("gw.yaml: line 3, column 1: ")
    assert str(info.value).startswith("1 problem in gw.yaml:\n  gw.yaml: line 3")


# --- semantic problems ---------------------------------------------------------------------

SEMANTIC = [
    ("server: {port: 70000}", "server.port: must be between 0 and 65535"),
    ("server: {port: -1}", "server.port: must be between 0 and 65535"),
    ("server: {workers: 0}", "server.workers: must be >= 1"),
    ("server: {max_body_bytes: 1023}", "server.max_body_bytes: must be >= 1024"),
    ("server: {host: ''}", "server.host: must not be empty"),
    ("server: {commit_after_s: 0}", "server.commit_after_s: must be > 0"),
    ("server: {shutdown_grace_s: .nan}", "server.shutdown_grace_s: must be > 0"),
    ("routing: {max_attempts: 0}", "routing.max_attempts: must be >= 1"),
    ("routing: {cooldown_s: -1}", "routing.cooldown_s: must be > 0"),
    ("store: {responses_ttl_s: 0}", "store.responses_ttl_s: must be > 0"),
    (
        "store: {url: 'postgres://db/x'}",
        "store.url: expected memory://, sqlite:///PATH, redis://HOST:PORT/DB, "
        "rediss://HOST:PORT/DB or redis+cluster://HOST:PORT[,HOST:PORT...]",
    ),
    ("providers: [{name: '', kind: mock}]", "providers[0].name: must not be empty"),
    ("providers: [{name: a/b, kind: mock}]", "providers[0].name: must not contain '/'"),
    (
        "providers: [{name: m, kind: mock}, {name: m, kind: ollama}]",
        "providers[1].name: duplicate provider name 'm'",
    ),
    (
        "providers: [{name: m, kind: mock, base_url: 'ftp://x'}]",
        "providers[0].base_url: must be an http:// or https:// URL",
    ),
    (
        "providers: [{name: o, kind: openai}]",
        "providers[0].keys: kind 'openai' needs at least one key",
    ),
    (
        "providers: [{name: o, kind: gemini, keys: [{weight: 2}]}]",
        "providers[0].keys[0].key: required for kind 'gemini'",
    ),
    (
        "providers: [{name: o, kind: openai, keys: [{key: ''}]}]",
        "providers[0].keys[0].key: must not be empty",
    ),
    (
        "providers: [{name: o, kind: openai, keys: [{key: k, weight: 0}]}]",
        "providers[0].keys[0].weight: must be >= 1",
    ),
    (
        "providers: [{name: o, kind: openai, keys: [{key: k, rpm: 0}]}]",
        "providers[0].keys[0].rpm: must be >= 1",
    ),
    (
        "providers: [{name: o, kind: openai, keys: [{key: k, tpm: 0}]}]",
        "providers[0].keys[0].tpm: must be >= 1",
    ),
    (
        "providers: [{name: o, kind: openai, keys: [{key: k, aws_session_token: t}]}]",
        "providers[0].keys[0].aws_session_token: not a field of kind 'openai'",
    ),
    (
        "providers: [{name: o, kind: openai, keys: [{key: k, credentials_file: f}]}]",
        "providers[0].keys[0].credentials_file: not a field of kind 'openai'",
    ),
    (
        "providers: [{name: m, kind: mock, timeouts: {total_s: 0}}]",
        "providers[0].timeouts.total_s: must be > 0",
    ),
    (
        "providers: [{name: a, kind: azure, api_version: '2024-10-21', keys: [{key: k}]}]",
        "providers[0].base_url: required for kind 'azure'",
    ),
    (
        "providers: [{name: a, kind: azure, base_url: 'https://x.openai.azure.com', "
        "keys: [{key: k}]}]",
        "providers[0].api_version: required for kind 'azure'",
    ),
    (
        "providers: [{name: b, kind: bedrock, keys: [{key: k}]}]",
        "providers[0].region: required for kind 'bedrock'",
    ),
    (
        "providers: [{name: b, kind: bedrock, region: us-east-1, keys: [{weight: 1}]}]",
        "providers[0].keys[0]: needs key, or aws_access_key_id and aws_secret_access_key",
    ),
    (
        "providers: [{name: b, kind: bedrock, region: us-east-1, keys: [{aws_access_key_id: i}]}]",
        "providers[0].keys[0].aws_secret_access_key: required with aws_access_key_id",
    ),
    (
        "providers: [{name: b, kind: bedrock, region: r, keys: [{aws_secret_access_key: s}]}]",
        "providers[0].keys[0].aws_access_key_id: required with aws_secret_access_key",
    ),
    (
        "providers: [{name: b, kind: bedrock, region: r, keys: [{key: k, aws_access_key_id: i, "
        "aws_secret_access_key: s}]}]",
        "providers[0].keys[0]: set either key or aws_access_key_id and aws_secret_access_key, "
        "not both",
    ),
    (
        "providers: [{name: v, kind: vertex, project: p, keys: [{credentials_file: f}]}]",
        "providers[0].region: required for kind 'vertex'",
    ),
    (
        "providers: [{name: v, kind: vertex, region: r, keys: [{credentials_file: f}]}]",
        "providers[0].project: required for kind 'vertex'",
    ),
    (
        "providers: [{name: v, kind: vertex, region: r, project: p, keys: [{weight: 1}]}]",
        "providers[0].keys[0].credentials_file: required for kind 'vertex'",
    ),
    (
        "providers: [{name: v, kind: vertex, region: r, project: p, "
        "keys: [{credentials_file: f, key: k}]}]",
        "providers[0].keys[0].key: not used by kind vertex (use credentials_file)",
    ),
    (
        "providers: [{name: o, kind: ollama, mock: {chunks: 3}}]",
        "providers[0].mock: not a field of kind 'ollama'",
    ),
    (
        "providers: [{name: o, kind: ollama, region: r}]",
        "providers[0].region: not a field of kind 'ollama'",
    ),
    (
        "providers: [{name: o, kind: ollama, project: p}]",
        "providers[0].project: not a field of kind 'ollama'",
    ),
    (
        "providers: [{name: o, kind: ollama, api_version: v}]",
        "providers[0].api_version: not a field of kind 'ollama'",
    ),
    (
        "providers: [{name: m, kind: mock, mock: {chunks: 0}}]",
        "providers[0].mock.chunks: must be >= 1",
    ),
    (
        "providers: [{name: m, kind: mock, mock: {delay_s: -0.1}}]",
        "providers[0].mock.delay_s: must be >= 0",
    ),
    ("models: [{name: m, targets: []}]", "models[0].targets: must have at least one target"),
    (
        "models: [{name: m, targets: [{provider: opneai, model: x}]}]",
        "models[0].targets[0].provider: unknown provider 'opneai'",
    ),
]

# Providers and models the model and key cases below refer to.
BASE = """\
providers:
  - {name: p, kind: mock}
  - {name: o, kind: openai, keys: [{key: sk-o}]}
  - {name: an, kind: anthropic, keys: [{key: sk-a}]}
models:
  - {name: m, targets: [{provider: p, model: x}]}
"""

SEMANTIC_WITH_BASE = [
    ("  - {name: '', targets: [{provider: p, model: x}]}", "models[1].name: must not be empty"),
    (
        "  - {name: m, targets: [{provider: p, model: x}]}",
        "models[1].name: duplicate model name 'm'",
    ),
    (
        "  - {name: n, targets: [{provider: p, model: ''}]}",
        "models[1].targets[0].model: must not be empty",
    ),
    (
        "  - {name: n, targets: [{provider: p, model: x, weight: 0}]}",
        "models[1].targets[0].weight: must be >= 1",
    ),
    (
        "  - {name: n, targets: [{provider: an, model: c, api: responses}]}",
        "models[1].targets[0].api: responses needs a provider of kind azure or openai, "
        "not anthropic",
    ),
    (
        "  - {name: n, targets: [{provider: p, model: x}], price: {input_per_mtok: -1, "
        "output_per_mtok: 1}}",
        "models[1].price.input_per_mtok: must be >= 0",
    ),
    ("keys: [{name: '', key: k}]", "keys[0].name: must not be empty"),
    ("keys: [{name: a, key: k}, {name: a, key: j}]", "keys[1].name: duplicate key name 'a'"),
    ("keys: [{name: a, key: ''}]", "keys[0].key: must not be empty"),
    ("keys: [{name: a, key: k}, {name: b, key: k}]", "keys[1].key: same key as keys[0]"),
    ("keys: [{name: a, key: k, budget_usd: -1}]", "keys[0].budget_usd: must be >= 0"),
    ("keys: [{name: a, key: k, rpm: 0}]", "keys[0].rpm: must be >= 1"),
    ("keys: [{name: a, key: k, tpm: 0}]", "keys[0].tpm: must be >= 1"),
    ("keys: [{name: a, key: k, models: [m, o/gpt-4o, x]}]", "keys[0].models[2]: unknown model 'x'"),
    ("keys: [{name: a, key: k, models: [nope/x]}]", "keys[0].models[0]: unknown model 'nope/x'"),
    ("keys: [{name: a, key: k, models: ['o/']}]", "keys[0].models[0]: unknown model 'o/'"),
    (
        "auth: {master_key: k}\nkeys: [{name: a, key: k}]",
        "keys[0].key: same as auth.master_key",
    ),
]


@pytest.mark.parametrize(("text", "problem"), SEMANTIC)
def test_semantic_problem(text: str, problem: str) -> None:
    assert problems_of(text) == [problem]


@pytest.mark.parametrize(("text", "problem"), SEMANTIC_WITH_BASE)
def test_semantic_problem_against_base(text: str, problem: str) -> None:
    assert problems_of(BASE + text) == [problem]


@pytest.mark.parametrize(
    "url",
    [
        "memory://",
        "sqlite:///./gateway.db",
        "sqlite:////var/lib/gateway.db",
        "redis://localhost:6379/0",
        "rediss://user:pw@cache.internal:6380/2",
        "redis://cache",
        "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        "rediss+cluster://:pw@cache-0:6380/0",
    ],
)
def test_store_urls_accepted(url: str) -> None:
    assert parse_config(f"store: {{url: '{url}'}}", {}).store.url == url


@pytest.mark.parametrize(
    "url",
    [
        *("sqlite:///", "sqlite://x.db", "redis://:6379/0", "redis://h:port/0", "redis://h/x"),
        *("redis+cluster://h", "redis+cluster://h:1,:2", "redis+cluster://h:1/1"),
    ],
)
def test_store_urls_rejected(url: str) -> None:
    (problem,) = problems_of(f"store: {{url: '{url}'}}")
    assert problem.startswith("store.url: expected memory://")


def test_valid_kinds_with_their_fields() -> None:
    config = parse_config(
        """\
providers:
  - {name: az, kind: azure, base_url: 'https://x.openai.azure.com/', api_version: 2024-10-21,
     keys: [{key: k}]}
  - {name: br, kind: bedrock, region: us-east-1, keys: [{key: k},
     {aws_access_key_id: i, aws_secret_access_key: s, aws_session_token: t}]}
  - {name: vx, kind: vertex, region: europe-west4, project: p, keys: [{credentials_file: f}]}
  - {name: ol, kind: ollama}
  - {name: mk, kind: mock, mock: {chunks: 3, delay_s: 0}}
models:
  - {name: r, targets: [{provider: az, model: gpt-4.1, api: responses}]}
""",
        {},
    )
    assert config.providers[0].api_version == "2024-10-21"  # a string, not a YAML date
    assert config.providers[4].mock is not None
    assert config.providers[4].mock.chunks == 3


def test_several_problems_are_all_reported() -> None:
    text = """\
server: {port: abc, workers: 0, nmae: 1}
store: {url: 'redis://:secretpw@cache:port/0'}
providers:
  - {name: openai, kind: openai, keys: [{key: "${OPENAI_API_KEY}"}]}
  - {name: x, kind: opneai}
  - {name: b, kind: bedrock}
models:
  - {name: m, targets: [{provider: opneai, model: g}, {provider: x, model: y}]}
  - {name: m, targets: []}
"""
    assert problems_of(text) == [
        "server.port: expected int, got str",
        "server.workers: must be >= 1",
        "server.nmae: unknown field",
        "store.url: expected memory://, sqlite:///PATH, redis://HOST:PORT/DB, "
        "rediss://HOST:PORT/DB or redis+cluster://HOST:PORT[,HOST:PORT...]",
        "providers[0].keys[0].key: environment variable OPENAI_API_KEY is not set",
        "providers[1].kind: must be one of anthropic, azure, bedrock, gemini, mock, ollama, "
        "openai, vertex",
        # a provider missing a field its kind requires is not built: its other rules (keys)
        # are checked once it is
        "providers[2].region: required for kind 'bedrock'",
        # providers[1] failed to convert, but its name is known: no "unknown provider 'x'".
        "models[0].targets[0].provider: unknown provider 'opneai'",
        "models[1].name: duplicate model name 'm'",
        "models[1].targets: must have at least one target",
    ]


def test_problems_are_in_file_order() -> None:
    text = """\
models:
  - {name: m, targets: [{provider: nope, model: x}]}
server:
  nmae: 1
  port: abc
"""
    assert problems_of(text) == [
        "models[0].targets[0].provider: unknown provider 'nope'",
        "server.nmae: unknown field",
        "server.port: expected int, got str",
    ]


def test_yaml_anchors_and_merge_keys() -> None:
    text = """\
providers:
  - &first {name: a, kind: mock, mock: {chunks: 2}}
  - {<<: *first, name: b}
"""
    a, b = parse_config(text, {}).providers
    assert (a.name, b.name, b.kind, b.mock) == ("a", "b", "mock", a.mock)


def test_recursive_alias_is_a_problem() -> None:
    assert problems_of("providers: &p [*p]") == ["providers[0]: recursive alias"]


def test_alias_bomb_is_a_problem() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    assert problems_of("\n".join(lines)) == [
        "<config>: more than 200000 values once aliases are expanded"
    ]


# --- interpolation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("${A}", {"A": "x"}, "x"),
        ("pre-${A}-post", {"A": "x"}, "pre-x-post"),
        ("${A:-dflt}", {}, "dflt"),
        ("${A:-dflt}", {"A": ""}, "dflt"),  # empty uses the default, like the shell
        ("${A:-dflt}", {"A": "set"}, "set"),
        ("${A:-}", {}, ""),
        ("${A:-a:b}", {}, "a:b"),
        ("${A:-${B}}", {"B": "b"}, "${B}"),  # defaults are taken literally
        ("${A}", {"A": ""}, ""),  # set but empty: empty, no default
        ("$${A}", {"A": "x"}, "${A}"),
        ("$$${A}", {"A": "x"}, "$${A}"),
        ("cost $5", {}, "cost $5"),
        ("${A}${B}", {"A": "1", "B": "2"}, "12"),
        ("${A}", {"A": "${B}"}, "${B}"),  # values are not expanded again
    ],
)
def test_interpolate(text: str, env: dict[str, str], expected: str) -> None:
    assert interpolate(text, env) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("${A", "unterminated '${' (write '$${' for a literal '${')"),
        ("${1A}", "invalid reference: expected ${NAME} or ${NAME:-default}"),
        ("${A:default}", "invalid reference: expected ${NAME} or ${NAME:-default}"),
        ("${}", "invalid reference: expected ${NAME} or ${NAME:-default}"),
        ("${MISSING}", "environment variable MISSING is not set"),
    ],
)
def test_interpolate_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        interpolate(text, {})


def test_numbers_from_interpolated_strings() -> None:
    text = """\
server: {port: "${PORT:-8080}", workers: "${WORKERS}", keepalive_s: "${KA:-0.5}"}
providers: [{name: m, kind: mock, keys: [{weight: "${W:-2}"}]}]
"""
    config = parse_config(text, {"PORT": "", "WORKERS": "3"})
    assert (config.server.port, config.server.workers, config.server.keepalive_s) == (
        8080,
        3,
        0.5,
    )
    assert config.providers[0].keys[0].weight == 2
    assert problems_of(text, {"WORKERS": "three"}) == ["server.workers: expected int, got str"]


def test_interpolation_applies_to_values_not_text() -> None:
    # A value with quotes, colons and a hash cannot break the YAML around it.
    value = "a'b\": c # d\n- e"
    config = parse_config('auth: {master_key: "${K}"}\n', {"K": value})
    assert config.auth.master_key.reveal() == value
    # Keys are not interpolated.
    assert problems_of("server: {'${X:-port}': 1}") == ["server.${X:-port}: unknown field"]


def test_missing_variable_with_path_and_no_followup_problem() -> None:
    text = """\
providers:
  - name: openai
    kind: openai
    keys: [{key: "${OPENAI_API_KEY}"}, {key: "${OPENAI_API_KEY_2}"}]
"""
    assert problems_of(text, {"OPENAI_API_KEY": "sk-1"}) == [
        "providers[0].keys[1].key: environment variable OPENAI_API_KEY_2 is not set"
    ]


def test_bad_reference_in_file_is_a_problem_at_its_path() -> None:
    assert problems_of("store: {url: '${STORE'}") == [
        "store.url: unterminated '${' (write '$${' for a literal '${')"
    ]


# --- secrets -------------------------------------------------------------------------------


def test_secret_hides_its_value() -> None:
    secret = Secret("sk-very-secret")
    assert repr(secret) == "Secret('***')"
    assert str(secret) == "Secret('***')"
    assert f"{secret}" == "Secret('***')"
    assert repr(Secret("")) == "Secret('')"
    assert secret.reveal() == "sk-very-secret"
    assert secret
    assert not Secret("")


def test_secret_equality_hash_and_immutability() -> None:
    assert Secret("a") == Secret("a")
    assert Secret("a") != Secret("b")
    assert Secret("a") != "a"
    assert len({Secret("a"), Secret("a"), Secret("b")}) == 2
    with pytest.raises(AttributeError):
        Secret("a")._value = "b"
    assert pickle.loads(pickle.dumps(Secret("a"))) == Secret("a")
    assert copy.deepcopy(Secret("a")) == Secret("a")


def test_config_repr_never_shows_a_secret() -> None:
    config = parse_config(design_example_complete(), DESIGN_ENV)
    for text in (repr(config), str(config), repr(config.providers), repr(config.keys)):
        for secret in ALL_SECRETS:
            assert secret not in text
    assert copy.deepcopy(config) == config


def test_problems_never_show_a_secret() -> None:
    env = {"K": "sk-leaky-0006", "PORT": "sk-leaky-0007", "KIND": "sk-leaky-0008"}
    text = """\
server: {port: "${PORT}"}
auth: {master_key: "${K}"}
store: {url: "redis://:sk-leaky-0009@host:notaport/0"}
providers:
  - {name: a, kind: "${KIND}", keys: [{key: "${K}"}]}
  - {name: b, kind: openai, keys: [{key: "${K}", weight: 0}]}
  - {name: c, kind: bedrock, region: r, keys: [{key: "${K}", aws_access_key_id: "${K}",
     aws_secret_access_key: "${K}"}]}
keys: [{name: v, key: "${K}"}, {name: w, key: "${K}"}]
"""
    with pytest.raises(ConfigError) as info:
        parse_config(text, env)
    assert len(info.value.problems) >= 6
    for secret in [*env.values(), "sk-leaky-0009"]:
        assert secret not in str(info.value)


def test_store_repr_hides_a_url_password() -> None:
    store = StoreConfig(url="redis://user:sk-pw-0010@cache:6379/0")
    assert repr(store) == "StoreConfig(url='redis://***@cache:6379/0')"
    assert repr(StoreConfig()) == "StoreConfig(url='sqlite:///./gateway.db')"


# --- built-in default, base URLs -----------------------------------------------------------


def test_default_config_without_env_keys() -> None:
    config = default_config({"GEMINI_API_KEY": "", "PATH": "/bin"})
    assert config.providers == [provider_config(name="mock", kind="mock")]
    assert config.models == [
        ModelConfig(name="mock", targets=[Target(provider="mock", model="mock")])
    ]
    assert config.store.url == "sqlite:///./gateway.db"
    assert (config.server, config.routing, config.keys) == (
        Config().server,
        Config().routing,
        [],
    )


def test_default_config_with_env_keys() -> None:
    env = {"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a", "GEMINI_API_KEY": "g"}
    config = default_config(env)
    assert [(p.name, p.kind) for p in config.providers] == [
        ("mock", "mock"),
        ("anthropic", "anthropic"),
        ("gemini", "gemini"),
        ("openai", "openai"),
    ]
    assert config.providers[3].keys == [ProviderKey(key=Secret("sk-o"))]
    assert [m.name for m in config.models] == ["mock"]
    assert "sk-o" not in repr(config)


@pytest.mark.parametrize(
    ("provider", "url"),
    [
        (provider_config(name="o", kind="openai"), "https://api.openai.com/v1"),
        (provider_config(name="a", kind="anthropic"), "https://api.anthropic.com"),
        (provider_config(name="g", kind="gemini"), "https://generativelanguage.googleapis.com"),
        (
            provider_config(name="b", kind="bedrock", region="eu-west-1"),
            "https://bedrock-runtime.eu-west-1.amazonaws.com",
        ),
        (
            provider_config(name="v", kind="vertex", region="us-central1", project="p"),
            "https://us-central1-aiplatform.googleapis.com",
        ),
        (
            provider_config(name="v", kind="vertex", region="global", project="p"),
            "https://aiplatform.googleapis.com",
        ),
        (provider_config(name="l", kind="ollama"), "http://localhost:11434"),
        (provider_config(name="m", kind="mock"), "mock://"),
        (provider_config(name="o", kind="openai", base_url="http://h:1/v1/"), "http://h:1/v1"),
        (
            provider_config(
                name="z", kind="azure", base_url="https://r.openai.azure.com", api_version="v1"
            ),
            "https://r.openai.azure.com",
        ),
    ],
)
def test_effective_base_url(provider: ProviderConfig, url: str) -> None:
    assert effective_base_url(provider) == url


@pytest.mark.parametrize(
    ("kind", "missing"),
    [("azure", "base_url"), ("azure", "api_version"), ("bedrock", "region"), ("vertex", "project")],
)
def test_a_kind_s_required_fields_are_required_by_its_type(kind: str, missing: str) -> None:
    fields = {"base_url": "https://r.example", "api_version": "v1", "region": "r", "project": "p"}
    fields.pop(missing)
    if kind == "bedrock":
        fields = {"region": fields["region"]} if "region" in fields else {}
    elif kind == "vertex":
        fields = {k: fields[k] for k in ("region", "project") if k in fields}
    else:
        fields = {k: fields[k] for k in ("base_url", "api_version") if k in fields}
    with pytest.raises(TypeError, match=missing):
        provider_config(name="p", kind=kind, **fields)


def test_a_kind_without_a_default_base_url_says_so() -> None:
    class Bare(ProviderBase, tag="bare", kw_only=True, frozen=True):
        kind = "bare"

    with pytest.raises(ValueError, match="bare"):
        effective_base_url(Bare(name="x"))


# --- files and check-config ----------------------------------------------------------------


def test_load_config_reads_a_file(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("server: {port: '${PORT}'}\n", encoding="utf-8")
    assert load_config(path, {"PORT": "9000"}).server.port == 9000
    assert load_config(str(path), {"PORT": "9001"}).server.port == 9001


def test_load_config_uses_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("server: {port: '${GATEWAY_TEST_PORT}'}\n", encoding="utf-8")
    monkeypatch.setenv("GATEWAY_TEST_PORT", "9002")
    assert load_config(path).server.port == 9002


def test_load_config_unreadable_files(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, {})
    assert info.value.problems == [f"{missing}: no such file"]
    binary = tmp_path / "bin.yaml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(ConfigError) as info:
        load_config(binary, {})
    assert info.value.problems == [f"{binary}: not UTF-8 text"]
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {})
    (problem,) = info.value.problems
    assert problem.startswith(f"{tmp_path}: cannot read")


def test_check_config_ok(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(design_example_complete(), encoding="utf-8")
    out = io.StringIO()
    assert check_config(str(path), out, DESIGN_ENV) == 0
    assert out.getvalue() == f"ok: {path}: 2 providers, 1 model, 1 key\n"


def test_check_config_problems(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(
        "server: {port: abc}\nmodels: [{name: m, targets: [{provider: x, model: y}]}]\n",
        encoding="utf-8",
    )
    out = io.StringIO()
    assert check_config(str(path), out, {}) == 1
    assert out.getvalue().splitlines() == [
        "server.port: expected int, got str",
        "models[0].targets[0].provider: unknown provider 'x'",
        f"2 problems in {path}",
    ]


def test_check_config_missing_file(tmp_path: Path) -> None:
    path = str(tmp_path / "nope.yaml")
    out = io.StringIO()
    assert check_config(path, out, {}) == 1
    assert out.getvalue().splitlines() == [f"{path}: no such file", f"1 problem in {path}"]


def test_check_config_yaml_error(tmp_path: Path) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text("server: {port: 1\n", encoding="utf-8")
    out = io.StringIO()
    assert check_config(str(path), out, {}) == 1
    first, last = out.getvalue().splitlines()
    assert first.startswith(f"{path}: line 2, column 1: ")
    assert last == f"1 problem in {path}"


# --- shipped examples ----------------------------------------------------------------------


def test_mock_example_needs_no_env() -> None:
    out = io.StringIO()
    assert check_config(str(EXAMPLES / "mock.yaml"), out, {}) == 0
    config = load_config(EXAMPLES / "mock.yaml", {})
    assert [m.name for m in config.models] == ["mock"]


def test_full_example_with_its_env() -> None:
    env = {"OPENAI_API_KEY": "sk-o", "ANTHROPIC_API_KEY": "sk-a"}
    config = load_config(EXAMPLES / "gateway.yaml", env)
    assert [p.kind for p in config.providers] == ["openai", "anthropic", "mock"]
    assert [m.name for m in config.models] == ["smart", "fast", "mock"]
    assert problems_of((EXAMPLES / "gateway.yaml").read_text(encoding="utf-8")) == [
        "providers[0].keys[0].key: environment variable OPENAI_API_KEY is not set",
        "providers[1].keys[0].key: environment variable ANTHROPIC_API_KEY is not set",
    ]


def test_docs_example_parses() -> None:
    docs = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = docs.split("```yaml\n", 1)[1].split("```", 1)[0]
    config = parse_config(example, DESIGN_ENV)
    assert [p.name for p in config.providers] == ["openai", "anthropic"]


# --- odds and ends -------------------------------------------------------------------------


def test_format_path() -> None:
    assert format_path(("models", 2, "targets", 0, "provider")) == "models[2].targets[0].provider"
    assert format_path(()) == ""


def test_structs_are_frozen_and_strict() -> None:
    config = Config()
    with pytest.raises(AttributeError):
        config.server = Config().server  # type: ignore[misc]
    with pytest.raises(msgspec.ValidationError, match="unknown field"):
        msgspec.convert({"nmae": 1}, Config)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("sk-abc\n", "contains a line break (a trailing newline from a file?)"),
        ("sk-a\r\nX-Injected: 1", "contains a line break (a trailing newline from a file?)"),
        (" sk-abc", "starts or ends with whitespace"),
    ],
)
def test_provider_keys_must_be_header_safe(value: str, message: str) -> None:
    text = "providers:\n  - {name: o, kind: openai, keys: [{key: '${K}'}]}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, env={"K": value})
    assert err.value.problems == [f"providers[0].keys[0].key: {message}"]
    assert value.strip() not in str(err.value)


def test_context_window_fallbacks_name_other_configured_models() -> None:
    problems = problems_of(
        """
        providers:
          - {name: p, kind: openai, keys: [{key: k}]}
        models:
          - name: short
            targets: [{provider: p, model: m, context_window: 0}]
            fallbacks: {context_window: [short, nowhere, long]}
          - {name: long, targets: [{provider: p, model: m2}]}
        """
    )
    assert problems == [
        "models[0].targets[0].context_window: must be >= 1",
        "models[0].fallbacks.context_window[0]: must name another model, not this one",
        "models[0].fallbacks.context_window[1]: unknown model 'nowhere'",
    ]


def test_recovery_and_continuation_are_checked() -> None:
    problems = problems_of(
        """
        providers:
          - {name: p, kind: openai, keys: [{key: k}], continuation: prefix}
        models:
          - name: m
            targets: [{provider: p, model: m}]
            recovery: {mode: continue, max_continuations: 0}
        """
    )
    assert problems == ["models[0].recovery.max_continuations: must be >= 1"]
    with pytest.raises(ConfigError) as err:
        parse_config(
            "providers:\n  - {name: p, kind: openai, keys: [{key: k}], continuation: always}\n",
            env={},
        )
    assert "continuation" in str(err.value)
    with pytest.raises(ConfigError) as err:  # only an OpenAI-compatible server declares it
        parse_config(
            "providers:\n  - {name: a, kind: anthropic, keys: [{key: k}], continuation: prefix}\n",
            env={},
        )
    assert "continuation" in str(err.value)
    config = parse_config(
        "providers:\n  - {name: p, kind: openai, keys: [{key: k}]}\n"
        "models:\n  - {name: m, targets: [{provider: p, model: x}], recovery: {mode: continue}}\n",
        env={},
    )
    recovery = config.models[0].recovery
    assert recovery is not None
    assert (recovery.mode, recovery.max_continuations) == ("continue", 2)
