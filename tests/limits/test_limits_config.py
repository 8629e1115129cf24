"""`server.limits` and `server.client_write_timeout_s` in the config: defaults and checks."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.config import LimitsConfig
from gateway.config import parse_config


def test_defaults() -> None:
    config = parse_config("providers: [{name: mock, kind: mock}]", env={})
    assert config.server.limits == LimitsConfig()
    limits = config.server.limits
    assert (limits.max_messages, limits.max_tools) == (2048, 512)
    assert limits.max_header_bytes == 8190
    assert config.server.client_write_timeout_s == 30.0


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("max_messages", 0, "server.limits.max_messages: must be >= 1"),
        ("max_tools", 0, "server.limits.max_tools: must be >= 1"),
        ("max_tool_argument_bytes", 0, "server.limits.max_tool_argument_bytes: must be >= 1"),
        ("max_concurrent_streams", 0, "server.limits.max_concurrent_streams: must be >= 1"),
        (
            "max_concurrent_streams_per_key",
            -1,
            "server.limits.max_concurrent_streams_per_key: must be >= 1",
        ),
        ("max_header_bytes", 1023, "server.limits.max_header_bytes: must be >= 1024"),
        ("max_tools", "many", "server.limits.max_tools: expected int, got str"),
        ("max_massages", 3, "server.limits.max_massages: unknown field"),
    ],
)
def test_bad_limits_are_named(field: str, value: object, problem: str) -> None:
    text = f"server: {{limits: {{{field}: {value}}}}}\nproviders: [{{name: mock, kind: mock}}]"
    with pytest.raises(ConfigError) as raised:
        parse_config(text, env={})
    assert any(p.endswith(problem) for p in raised.value.problems), raised.value.problems


def test_write_timeout_must_be_positive() -> None:
    text = "server: {client_write_timeout_s: 0}\nproviders: [{name: mock, kind: mock}]"
    with pytest.raises(ConfigError) as raised:
        parse_config(text, env={})
    assert any("server.client_write_timeout_s: must be > 0" in p for p in raised.value.problems)
