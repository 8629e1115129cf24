"""Router.plan with key health: strategies, skipping, capacity, and the answer when nothing
is left."""

from __future__ import annotations

import math
import random
import time
from collections import Counter

import pytest

from gateway.config import parse_config
from gateway.errors import NoUpstreamAvailable
from gateway.errors import UpstreamsRateLimited
from gateway.providers.registry import make_adapter
from gateway.routing.balancer import strategy_order
from gateway.routing.health import ADMITTED
from gateway.routing.health import KeyHealth
from gateway.routing.router import Attempt
from gateway.routing.router import Router

PROVIDERS = """
providers:
  - name: up
    kind: openai
    base_url: http://up.test/v1
    keys: [{key: up-a, weight: 3, name: a}, {key: up-b, weight: 1, name: b}]
  - name: alt
    kind: openai
    base_url: http://alt.test/v1
    keys: [{key: alt-a, name: alt-a}]
  - name: capped
    kind: openai
    base_url: http://capped.test/v1
    keys: [{key: c-1, rpm: 2, name: c1}, {key: c-2, name: c2}]
  - name: solo
    kind: openai
    base_url: http://solo.test/v1
    keys: [{key: solo-1}]
models:
  - name: smart
    targets:
      - {provider: up, model: m-up, priority: 0}
      - {provider: alt, model: m-alt, priority: 1}
  - name: pair
    targets:
      - {provider: up, model: m-up}
      - {provider: alt, model: m-alt}
"""


def router(strategy: str = "weighted", seed: int = 0, max_attempts: int = 10) -> Router:
    routing = f"routing: {{strategy: {strategy}, max_attempts: {max_attempts}}}\n"
    cfg = parse_config(routing + PROVIDERS, env={})
    adapters = {p.name: make_adapter(p) for p in cfg.providers}
    return Router(cfg, adapters, rng=random.Random(seed))


def labels(plan: list[Attempt]) -> list[str]:
    return [a.health.label for a in plan]


def health(r: Router, provider: str, index: int) -> KeyHealth:
    return r.slots[provider][index].health


def test_weighted_split_follows_the_weights_within_the_binomial_bound() -> None:
    r = router(seed=1234)
    n, p = 1000, 0.75  # key a has weight 3 of 4
    firsts = Counter(labels(r.plan("up/x"))[0] for _ in range(n))
    bound = 4 * math.sqrt(p * (1 - p) / n)  # four standard deviations: ~0.055
    assert abs(firsts["a"] / n - p) < bound


def test_plan_order_keys_of_a_target_then_the_next_priority() -> None:
    r = router()
    assert sorted(labels(r.plan("smart"))[:2]) == ["a", "b"]
    assert labels(r.plan("smart"))[2:] == ["alt-a"]


def test_an_unhealthy_key_is_skipped_and_the_rest_keeps_its_order() -> None:
    r = router()
    a = health(r, "up", 0)
    a.auth_failed(a.begin(time.monotonic(), "m-up"), time.monotonic())
    for _ in range(20):
        assert labels(r.plan("smart")) == ["b", "alt-a"]


def test_a_target_without_healthy_keys_is_skipped() -> None:
    r = router()
    now = time.monotonic()
    for i in range(2):
        h = health(r, "up", i)
        h.rate_limited(h.begin(now, "m-up"), now, "m-up", 30.0)
    assert labels(r.plan("smart")) == ["alt-a"]
    assert sorted(labels(r.plan("up/other-model"))) == ["a", "b"]  # a 429 is per model


def test_nothing_healthy_is_a_503_with_the_soonest_recovery() -> None:
    r = router()
    now = time.monotonic()
    for provider, i in (("up", 0), ("alt", 0)):
        h = health(r, provider, i)
        h.auth_failed(h.begin(now, "m"), now)
    h = health(r, "up", 1)
    for _ in range(5):
        h.server_failed(h.begin(now, "m-up"), now)
    with pytest.raises(NoUpstreamAvailable) as info:
        r.plan("smart")
    err = info.value
    assert not isinstance(err, UpstreamsRateLimited)
    assert err.status == 503
    assert err.code == "no_upstream_available"
    assert err.headers["Retry-After"] == "5"  # circuit_open_s, the soonest; auth holds 600 s
    assert err.headers["x-gateway-attempts"] == "0"


def test_only_rate_limits_left_is_a_429_with_retry_after() -> None:
    r = router()
    now = time.monotonic()
    for provider, i, model, wait in (
        ("up", 0, "m-up", 12.2),
        ("up", 1, "m-up", 40),
        ("alt", 0, "m-alt", 3),
    ):
        h = health(r, provider, i)
        h.rate_limited(h.begin(now, model), now, model, wait)
    with pytest.raises(UpstreamsRateLimited) as info:
        r.plan("smart")
    assert info.value.status == 429
    assert info.value.code == "rate_limit_exceeded"
    assert info.value.headers["Retry-After"] == "3"


def test_a_key_at_its_rpm_is_skipped_not_hammered() -> None:
    r = router()
    c1 = health(r, "capped", 0)
    now = time.monotonic()
    for _ in range(2):
        c1.succeeded(c1.begin(now, "x"), None, 0, now)
    for _ in range(20):
        assert labels(r.plan("capped/x")) == ["c2"]


def test_the_fixed_plan_fast_path_obeys_health() -> None:
    r = router()
    first = r.plan("solo/x")
    assert r.plan("solo/x") is first  # built once
    h = first[0].health
    now = time.monotonic()
    h.rate_limited(h.begin(now, "x"), now, "x", 9.0)
    with pytest.raises(UpstreamsRateLimited) as info:
        r.plan("solo/x")
    assert info.value.headers["Retry-After"] == "9"
    assert r.plan("solo/y") is not None  # another model of the key is not cooling


def test_least_inflight_prefers_the_idle_key() -> None:
    r = router("least_inflight")
    a = health(r, "up", 0)
    a.begin(time.monotonic(), "m-up")
    for _ in range(20):
        assert labels(r.plan("up/m-up")) == ["b", "a"]
    a.released(ADMITTED)
    b = health(r, "up", 1)
    b.begin(time.monotonic(), "m-up")
    b.begin(time.monotonic(), "m-up")
    assert labels(r.plan("up/m-up")) == ["a", "b"]


def test_least_inflight_ties_keep_the_weighted_draw() -> None:
    r = router("least_inflight", seed=5)
    firsts = Counter(labels(r.plan("up/m"))[0] for _ in range(1000))
    assert abs(firsts["a"] / 1000 - 0.75) < 4 * math.sqrt(0.75 * 0.25 / 1000)


def test_latency_tries_unmeasured_keys_first_then_the_fastest() -> None:
    r = router("latency")
    a, b = health(r, "up", 0), health(r, "up", 1)
    now = time.monotonic()
    a.succeeded(a.begin(now, "m"), 0.8, 0, now)
    assert labels(r.plan("up/m")) == ["b", "a"]  # b was never measured
    b.succeeded(b.begin(now, "m"), 2.0, 0, now)
    assert labels(r.plan("up/m")) == ["a", "b"]
    for _ in range(5):  # b gets faster: the EWMA follows
        b.succeeded(b.begin(now, "m"), 0.1, 0, now)
    assert b.ewma_ttft is not None
    assert b.ewma_ttft < 0.8
    assert labels(r.plan("up/m")) == ["b", "a"]


def test_latency_orders_targets_of_one_priority_by_their_best_key() -> None:
    r = router("latency")
    now = time.monotonic()
    alt = health(r, "alt", 0)
    alt.succeeded(alt.begin(now, "m-alt"), 0.01, 0, now)
    for i in range(2):
        h = health(r, "up", i)
        h.succeeded(h.begin(now, "m-up"), 5.0, 0, now)
    for _ in range(10):
        assert labels(r.plan("pair"))[0] == "alt-a"
    # across priorities latency changes nothing: priority 0 first however slow
    assert labels(r.plan("smart"))[-1] == "alt-a"


def test_strategy_order_sorts_stably_by_score() -> None:
    rng = random.Random(0)
    out = strategy_order("latency", ["x", "y", "z"], [1, 1, 1], [2.0, -1.0, 2.0], rng)
    assert out[0] == "y"
    assert sorted(out[1:]) == ["x", "z"]


def test_keys_are_labelled_by_name_or_fingerprint_never_the_secret() -> None:
    r = router()
    assert health(r, "up", 0).label == "a"
    solo = health(r, "solo", 0)
    assert len(solo.label) == 8
    assert "solo" not in solo.label
    assert solo.store_key.startswith("health:solo:")
    assert "solo-1" not in solo.store_key
