"""The request_log and tracing sections: their defaults, every rule, and a sink URL's
password never in an error or a repr."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.config import parse_config
from gateway.server.reload import restart_only_changes


def problems(text: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, env=env or {})
    return str(caught.value)


def test_absent_sections_are_off_and_present_ones_take_the_defaults() -> None:
    config = parse_config("{}", env={})
    assert config.request_log is None
    assert config.tracing is None
    config = parse_config(
        "request_log: {}\ntracing: {}\n", env={"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}
    )
    assert config.request_log is not None
    assert (config.request_log.sink, config.request_log.bodies) == ("store", "off")
    assert config.request_log.retention_days == 30
    assert config.tracing is not None
    assert config.tracing.sample_ratio == 1.0


def test_every_rule() -> None:
    text = problems(
        """
request_log: {sink: "mysql://x", retention_days: 0, queue_max: 0, batch_max: 0, flush_s: 0}
tracing: {otlp_endpoint: "ftp://x", sample_ratio: 1.5, service_name: " "}
"""
    )
    for message in (
        "request_log.sink: expected store, sqlite:///PATH or postgresql://",
        "request_log.retention_days: must be a positive number of days",
        "request_log.queue_max: must be at least 1",
        "request_log.batch_max: must be at least 1",
        "request_log.flush_s: must be above 0 and at most 60",
        "tracing.otlp_endpoint: must be an http:// or https:// URL",
        "tracing.sample_ratio: must be between 0 and 1",
        "tracing.service_name: must not be empty",
    ):
        assert message in text
    assert "needs otlp_endpoint (or OTEL_EXPORTER_OTLP_ENDPOINT" in problems("tracing: {}")
    assert "request_log.bodies" in problems("request_log: {bodies: some}")


def test_the_redis_store_refuses_the_store_sink_and_takes_the_others() -> None:
    redis = 'store: {url: "redis://127.0.0.1:6379/0"}\n'
    assert "the redis store keeps no request log" in problems(redis + "request_log: {}")
    parse_config(redis + 'request_log: {sink: "sqlite:///tmp/log.db"}', env={})
    parse_config(redis + 'request_log: {sink: "postgresql://u:p@127.0.0.1:5432/db"}', env={})


def test_a_sink_password_is_never_shown() -> None:
    config = parse_config('request_log: {sink: "postgresql://u:hunter2@db:5432/x"}', env={})
    assert "hunter2" not in repr(config.request_log)
    assert "hunter2" not in problems('request_log: {sink: "postgresql://u:hunter2@db:notaport/x"}')


def test_both_sections_change_only_with_a_restart() -> None:
    old = parse_config("{}", env={})
    new = parse_config("request_log: {}", env={})
    assert restart_only_changes(old, new) == [
        "request_log: changes only with a restart; nothing was applied"
    ]
