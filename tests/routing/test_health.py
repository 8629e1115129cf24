"""KeyHealth: every transition, driven by an injected clock (plain floats)."""

from __future__ import annotations

import pytest

from gateway.routing.health import ADMITTED
from gateway.routing.health import AUTH_FAILED
from gateway.routing.health import CIRCUIT_OPEN
from gateway.routing.health import PROBE
from gateway.routing.health import PROBE_WAIT_S
from gateway.routing.health import RATE_LIMITED
from gateway.routing.health import RECOVERED
from gateway.routing.health import REFUSED
from gateway.routing.health import HealthPolicy
from gateway.routing.health import KeyHealth
from gateway.routing.health import MinuteWindow

POLICY = HealthPolicy(
    cooldown_s=30.0,
    circuit_failures=3,
    circuit_open_s=5.0,
    circuit_max_open_s=18.0,
    auth_hold_s=600.0,
)
M = "gpt-x"


class Changes:
    def __init__(self) -> None:
        self.seen: list[tuple[str, float, str | None, bool]] = []

    def __call__(
        self, health: KeyHealth, reason: str, until: float, model: str | None, first: bool
    ) -> None:
        self.seen.append((reason, until, model, first))


def key(policy: HealthPolicy = POLICY, **limits: int) -> tuple[KeyHealth, Changes]:
    h = KeyHealth("up", "k1", policy, **limits)  # type: ignore[arg-type]
    changes = Changes()
    h.on_change = changes
    return h, changes


def fail(h: KeyHealth, now: float, times: int = 1) -> None:
    for _ in range(times):
        ticket = h.begin(now, M)
        assert ticket != REFUSED
        h.server_failed(ticket, now)


def test_a_fresh_key_is_clear_and_admits() -> None:
    h, _ = key()
    assert h.clear
    assert h.wait_s(0.0, M) == 0
    assert h.begin(0.0, M) == ADMITTED
    assert h.inflight == 1
    h.succeeded(ADMITTED, 0.2, 10, 0.5)
    assert h.inflight == 0
    assert h.state(1.0) == "healthy"


def test_429_cools_that_model_down_for_its_retry_after() -> None:
    h, changes = key()
    h.rate_limited(h.begin(100.0, M), 100.0, M, 7.0)
    assert not h.clear
    assert h.wait_s(100.0, M) == pytest.approx(7.0)
    assert h.wait_s(100.0, "other-model") == 0  # providers limit per model
    assert h.begin(106.9, M) == REFUSED
    assert h.refusal(106.9, M) == (pytest.approx(0.1), True)  # rate limits alone
    assert h.begin(107.0, M) == ADMITTED
    assert changes.seen == [(RATE_LIMITED, 107.0, M, True)]


def test_429_without_retry_after_uses_cooldown_s() -> None:
    h, _ = key()
    h.rate_limited(h.begin(0.0, M), 0.0, M, None)
    assert h.wait_s(0.0, M) == 30.0
    assert h.wait_s(30.0, M) == 0
    assert h.clear  # the expired cooldown is gone: back on the fast path


def test_auth_failure_holds_the_key_then_one_probe() -> None:
    h, changes = key()
    h.auth_failed(h.begin(0.0, M), 0.0)
    assert h.state(1.0) == AUTH_FAILED
    assert h.begin(599.0, M) == REFUSED
    assert h.refusal(599.0, M) == (1.0, False)  # not a rate limit: a 503, not a 429
    assert h.begin(600.0, M) == PROBE
    assert h.state(600.0) == "half_open"
    assert h.begin(600.0, M) == REFUSED  # exactly one probe in flight
    assert h.wait_s(600.0, M) == PROBE_WAIT_S
    h.succeeded(PROBE, 0.3, 5, 601.0)
    assert h.state(601.0) == "healthy"
    assert h.clear
    assert changes.seen == [(AUTH_FAILED, 600.0, None, True), (RECOVERED, 0.0, None, True)]


def test_a_failed_auth_probe_holds_again_without_a_second_first() -> None:
    h, changes = key()
    h.auth_failed(h.begin(0.0, M), 0.0)
    h.auth_failed(h.begin(600.0, M), 600.0)
    assert h.wait_s(600.0, M) == 600.0
    assert [first for _, _, _, first in changes.seen] == [True, False]  # one loud line


def test_circuit_opens_after_consecutive_failures_and_backs_off() -> None:
    h, changes = key()
    fail(h, 0.0, 2)
    assert h.clear
    assert h.failures == 2
    fail(h, 0.0)
    assert h.state(0.0) == CIRCUIT_OPEN
    assert h.wait_s(0.0, M) == 5.0
    # half-open: one probe; its failure re-opens for twice as long
    assert h.begin(5.0, M) == PROBE
    assert h.begin(5.0, M) == REFUSED
    h.server_failed(PROBE, 5.0)
    assert h.wait_s(5.0, M) == 10.0
    fail(h, 15.0)
    assert h.wait_s(15.0, M) == 18.0  # 20 capped at circuit_max_open_s
    assert h.begin(33.0, M) == PROBE
    h.succeeded(PROBE, None, 0, 33.0)
    assert h.state(33.0) == "healthy"
    assert h.opens == 0
    assert h.failures == 0
    fail(h, 40.0, 3)
    assert h.wait_s(40.0, M) == 5.0  # closed again: the backoff starts over
    reasons = [r for r, _, _, _ in changes.seen]
    assert reasons == [CIRCUIT_OPEN] * 3 + [RECOVERED, CIRCUIT_OPEN]


def test_sane_answers_reset_the_failure_count() -> None:
    h, _ = key()
    fail(h, 0.0, 2)
    h.answered(h.begin(0.0, M))  # a client-caused 400
    fail(h, 0.0, 2)
    h.rate_limited(h.begin(0.0, M), 0.0, "other", 1.0)  # a 429 is an answer too
    fail(h, 0.0, 2)
    assert h.block is None


def test_client_gone_counts_nothing_and_frees_the_probe() -> None:
    h, _ = key()
    fail(h, 0.0, 3)
    assert h.begin(5.0, M) == PROBE
    h.released(PROBE)
    assert h.inflight == 0
    assert h.begin(5.0, M) == PROBE  # another request may probe
    assert h.failures == 3


def test_an_attempt_that_began_before_the_circuit_opened_does_not_extend_it() -> None:
    h, _ = key()
    early = h.begin(0.0, M)
    fail(h, 0.0, 3)
    h.server_failed(early, 1.0)
    assert h.wait_s(1.0, M) == 4.0
    assert h.opens == 1


def test_inflight_and_ewma() -> None:
    h, _ = key()
    tickets = [h.begin(0.0, M) for _ in range(3)]
    assert h.inflight == 3
    h.succeeded(tickets[0], 1.0, 0, 0.0)
    h.succeeded(tickets[1], 2.0, 0, 0.0)
    assert h.ewma_ttft == pytest.approx(1.0 + 0.3 * (2.0 - 1.0))
    h.released(tickets[2])
    assert h.inflight == 0


def test_rpm_capacity_skips_the_key_until_the_window_moves() -> None:
    h, _ = key(rpm=3)
    for t in (10.2, 20.5, 30.9):
        h.succeeded(h.begin(t, M), None, 0, t)
    assert h.begin(31.0, M) == REFUSED
    assert h.refusal(31.0, M) == (pytest.approx(69.0 - 31.0 + 1.0), True)
    assert h.begin(69.9, M) == REFUSED
    assert h.begin(70.0, M) == ADMITTED  # the request of second 10 left the window


def test_tpm_capacity_counts_tokens_from_usage() -> None:
    h, _ = key(tpm=100)
    h.succeeded(h.begin(0.0, M), None, 60, 0.0)
    assert h.begin(1.0, M) == ADMITTED
    h.succeeded(ADMITTED, None, 40, 1.0)
    assert h.begin(2.0, M) == REFUSED
    assert h.begin(59.9, M) == REFUSED
    assert h.begin(60.0, M) == ADMITTED  # second 0's 60 tokens left the window: 40 < 100


def test_minute_window_slides_and_survives_long_gaps() -> None:
    w = MinuteWindow()
    w.add(5.0, 2)
    w.add(30.0, 3)
    assert w.used(64.9) == 5
    assert w.used(65.0) == 3
    assert w.frees_in(65.0) == 25.0
    assert w.used(10_000.0) == 0
    w.add(10_000.5, 1)
    assert w.used(10_001.0) == 1


def test_mirrored_holds_from_other_processes() -> None:
    h, changes = key()
    h.mirror(50.0, CIRCUIT_OPEN, {M: 20.0})
    assert not h.clear
    assert h.refusal(10.0, M) == (40.0, False)
    assert h.refusal(10.0, "other") == (40.0, False)
    h.mirror(0.0, "", {M: 20.0})
    assert h.refusal(10.0, M) == (10.0, True)
    assert h.state(10.0) == "healthy"
    h.mirror(0.0, "", {})
    assert h.clear
    assert changes.seen == []  # what others saw is not ours to announce again


def test_cooldowns_of_client_chosen_models_are_bounded() -> None:
    h, _ = key()
    for i in range(1000):
        h.rate_limited(h.begin(0.0, f"m{i}"), 0.0, f"m{i}", 5.0)
    assert len(h.cooling) <= 256
    assert h.wait_s(0.0, "m999") == 5.0
