"""What attempt outcomes do to the metrics and the log (gateway/upstream/outcome.py, events.py)."""

from __future__ import annotations

import logging
import random
import time

import pytest

from gateway.config import parse_config
from gateway.errors import UpstreamStatusError
from gateway.errors import UpstreamTimeout
from gateway.providers.registry import make_adapter
from gateway.routing.router import Router
from gateway.upstream.outcome import count_move
from gateway.upstream.outcome import error_kind
from gateway.upstream.outcome import report_failure

CONFIG = """
routing: {circuit_failures: 2}
providers:
  - name: up
    kind: openai
    base_url: http://up.test/v1
    keys: [{key: sk-secret-1, name: one}, {key: sk-secret-2}]
  - name: alt
    kind: openai
    base_url: http://alt.test/v1
    keys: [{key: sk-secret-3}]
models:
  - name: smart
    targets:
      - {provider: up, model: m}
      - {provider: alt, model: m, priority: 1}
"""


def router() -> Router:
    cfg = parse_config(CONFIG, env={})
    return Router(cfg, {p.name: make_adapter(p) for p in cfg.providers}, rng=random.Random(0))


def value(r: Router, name: str, **labels: str) -> float:
    got = r.metrics.registry.get_sample_value(name, labels)
    return 0.0 if got is None else got


def status(code: int, retry_after: float | None = None) -> UpstreamStatusError:
    err = UpstreamStatusError("x", upstream_status=code, retryable=code != 400)
    err.retry_after_s = retry_after
    return err


def test_outcomes_count_errors_and_cooldowns(caplog: pytest.LogCaptureFixture) -> None:
    r = router()
    plan = r.plan("smart")
    first = plan[0]
    now = time.monotonic()
    report_failure(first, first.health.begin(now, "m"), status(429, 3.0))
    assert value(r, "gateway_key_cooldowns_total", provider="up", reason="rate_limited") == 1
    assert value(r, "gateway_upstream_errors_total", provider="up", kind="rate_limited") == 1
    assert first.health.wait_s(time.monotonic(), "m") > 2.5
    with caplog.at_level(logging.INFO, logger="gateway.routing"):
        second = plan[1]
        for _ in range(2):  # a second 401 (after the hold) is no new loud line
            second.health.blocked_until = 0.0
            report_failure(second, second.health.begin(time.monotonic(), "m"), status(401))
    errors = [rec for rec in caplog.records if rec.levelno == logging.ERROR]
    assert len(errors) == 1
    assert "sk-secret" not in caplog.text
    assert value(r, "gateway_key_cooldowns_total", provider="up", reason="auth_failed") == 2
    alt = plan[2]
    for _ in range(2):
        timeout = UpstreamTimeout("t", code="first_byte_timeout")
        report_failure(alt, alt.health.begin(time.monotonic(), "m"), timeout)
    assert value(r, "gateway_key_cooldowns_total", provider="alt", reason="circuit_open") == 1
    kind = "first_byte_timeout"
    assert value(r, "gateway_upstream_errors_total", provider="alt", kind=kind) == 2
    report_failure(alt, alt.health.begin(time.monotonic() + 60, "m"), status(400))
    assert alt.health.failures == 0  # the client's 400: the key is alive


def test_retries_and_failovers() -> None:
    r = router()
    a, b, c = r.plan("smart")
    count_move(a, b, "smart")
    count_move(b, c, "smart")
    count_move(b, c, "up/m")
    assert value(r, "gateway_retries_total", provider="up") == 1
    assert value(r, "gateway_failovers_total", model="smart") == 1
    assert value(r, "gateway_failovers_total", model="other") == 1


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (status(429), "rate_limited"),
        (status(403), "auth"),
        (status(404), "http_4xx"),
        (status(503), "http_5xx"),
        (UpstreamTimeout("t", code="connect_timeout"), "connect_timeout"),
        (UpstreamTimeout("t"), "upstream_timeout"),
    ],
)
def test_error_kinds_are_bounded_words(err: UpstreamStatusError, kind: str) -> None:
    assert error_kind(err) == kind
