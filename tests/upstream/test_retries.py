"""retry_wait: which failures are tried again on the same target, for how long, how often."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from gateway.config import RoutingConfig
from gateway.errors import ProxyRefusedError
from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamError
from gateway.errors import UpstreamStreamError
from gateway.errors import UpstreamTimeout
from gateway.upstream.retries import BACKOFF_S
from gateway.upstream.retries import RetryPolicy
from gateway.upstream.retries import retry_wait

POLICY = RetryPolicy(per_target=1, max_wait_s=5.0)


def attempt(name: str = "p", wait: float = 0.0) -> Any:
    health = SimpleNamespace(wait_s=lambda now, model: wait)
    return SimpleNamespace(provider=SimpleNamespace(name=name), model="m", health=health)


def failure(status: int | None, retry_after: float | None = None) -> UpstreamError:
    err = UpstreamError("x", upstream_status=status)
    err.retry_after_s = retry_after
    return err


@pytest.mark.parametrize("err", [failure(500), failure(503), UpstreamConnectError("reset")])
def test_transient_failures_back_off_once(err: UpstreamError) -> None:
    retried: dict[tuple[str, str], int] = {}
    wait = retry_wait(POLICY, err, attempt(), [], retried)
    assert wait is not None
    assert BACKOFF_S * 0.5 <= wait <= BACKOFF_S * 1.5
    assert retry_wait(POLICY, err, attempt(), [], retried) is None  # used up


@pytest.mark.parametrize(
    "err",
    [
        failure(400),
        failure(401),
        UpstreamTimeout("slow"),
        failure(429),
        ProxyRefusedError("proxy refused CONNECT: HTTP 407"),  # a wrong password stays wrong
        UpstreamStreamError("bad request", code="invalid_request_error"),
    ],
)
def test_other_failures_are_not_retried_here(err: UpstreamError) -> None:
    # a 429 without Retry-After: its cooldown is unknown, the next attempt goes first
    assert retry_wait(POLICY, err, attempt(), [], {}) is None


def test_retry_after_is_waited_only_when_short_and_nothing_is_sooner() -> None:
    short = failure(429, retry_after=1.0)
    wait = retry_wait(POLICY, short, attempt(), [attempt("other", wait=10.0)], {})
    assert wait is not None
    assert 1.0 <= wait <= 1.05
    assert retry_wait(POLICY, short, attempt(), [attempt("other")], {}) is None  # sooner
    assert retry_wait(POLICY, failure(429, retry_after=6.0), attempt(), [], {}) is None
    assert retry_wait(RetryPolicy(), short, attempt(), [], {}) is None  # per_target 0


@pytest.mark.parametrize(
    "err",
    [
        UpstreamStreamError("overloaded", transient=True),  # as its adapter classifies it
        failure(529),
        UpstreamConnectError("reset"),
    ],
)
def test_transient_errors_of_every_kind_are_retried(err: UpstreamError) -> None:
    assert retry_wait(POLICY, err, attempt(), [], {}) is not None


def test_the_shipped_default_retries_once() -> None:
    assert RetryPolicy.of(RoutingConfig()).per_target == 1
