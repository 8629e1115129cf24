"""The routing and provider-key fields of the config, and their rules."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.config import parse_config

OPENAI = "providers:\n  - {name: up, kind: openai, keys: [{key: k1, name: first}, {key: k2}]}\n"


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, env={})
    return info.value.problems


def test_defaults() -> None:
    routing = parse_config("", env={}).routing
    assert routing.strategy == "weighted"
    assert (routing.circuit_failures, routing.circuit_open_s) == (5, 5.0)
    assert (routing.circuit_max_open_s, routing.auth_hold_s) == (30.0, 600.0)


@pytest.mark.parametrize("strategy", ["weighted", "least_inflight", "latency"])
def test_strategies(strategy: str) -> None:
    assert parse_config(f"routing: {{strategy: {strategy}}}", env={}).routing.strategy == strategy


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("routing: {circuit_failures: 0}", "routing.circuit_failures: must be >= 1"),
        ("routing: {auth_hold_s: 0}", "routing.auth_hold_s: must be > 0"),
        ("routing: {circuit_open_s: -1}", "routing.circuit_open_s: must be > 0"),
        (
            "routing: {circuit_open_s: 10, circuit_max_open_s: 5}",
            "routing.circuit_max_open_s: must be >= routing.circuit_open_s",
        ),
    ],
)
def test_routing_rules(text: str, problem: str) -> None:
    assert problems(text) == [problem]


def test_key_names_are_optional_and_unique_within_a_provider() -> None:
    keys = parse_config(OPENAI, env={}).providers[0].keys
    assert [k.name for k in keys] == ["first", None]
    dup = "providers:\n  - {name: up, kind: openai, keys: [{key: a, name: x}, {key: b, name: x}]}\n"
    assert problems(dup) == ["providers[0].keys[1].name: duplicate key name 'x'"]
    empty = "providers:\n  - {name: up, kind: openai, keys: [{key: a, name: ''}]}\n"
    assert problems(empty) == ["providers[0].keys[0].name: must not be empty"]
