"""The health of one provider key, as arithmetic on times passed in (sans-IO).

One `KeyHealth` per configured key (a keyless provider has one for its endpoint). Times are
monotonic seconds given by the caller; nothing here reads a clock, logs or awaits. What it
tracks, and what each outcome does:

    429                  that upstream model on this key cools down for the upstream's
                         retry-after, else `routing.cooldown_s` (providers limit per model)
    401/403              the key is out of rotation for `routing.auth_hold_s`, then half-open
    5xx, timeout, connect failure, broken stream
                         counts a consecutive failure; `circuit_failures` of them open the
                         circuit for `circuit_open_s`, doubling per re-open up to
                         `circuit_max_open_s`, then half-open
    no credential        (a cloud identity that gave none) opens the circuit at once
    half-open            exactly one probe may be in flight; its success closes the circuit
                         (or ends the auth hold), its failure opens it again
    any sane answer      (a success, a 429, a client-caused 4xx) resets the failure count
    client gone          counts nothing

Capacity: `rpm` and `tpm` are sliding one-minute windows (sixty one-second buckets); a key at
its limit waits for the window to move. Holds written by other processes (through the shared
store) are mirrored in `shared_*` and obeyed as well. `on_change` hears every transition to
unavailable and every recovery, so IO code can log, count and share it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

PROBE_WAIT_S = 1.0  # how long others are told to wait while a half-open probe is in flight
EWMA_ALPHA = 0.3
MAX_COOLING_MODELS = 256  # models are client-chosen with provider/model addressing: bounded

# What `begin` answers: refused, or the kind of attempt admitted.
REFUSED, ADMITTED, PROBE = 0, 1, 2

AUTH_FAILED = "auth_failed"
CIRCUIT_OPEN = "circuit_open"
RATE_LIMITED = "rate_limited"
RECOVERED = "recovered"


class HealthPolicy(msgspec.Struct, frozen=True, kw_only=True):
    """The thresholds of `routing` that key health applies."""

    cooldown_s: float = 30.0
    circuit_failures: int = 5
    circuit_open_s: float = 5.0
    circuit_max_open_s: float = 30.0
    auth_hold_s: float = 600.0

    @classmethod
    def of(cls, routing: Any) -> HealthPolicy:
        return cls(
            cooldown_s=routing.cooldown_s,
            circuit_failures=routing.circuit_failures,
            circuit_open_s=routing.circuit_open_s,
            circuit_max_open_s=routing.circuit_max_open_s,
            auth_hold_s=routing.auth_hold_s,
        )


class MinuteWindow:
    """A count over the last minute, in sixty one-second buckets; O(1) amortised."""

    __slots__ = ("_counts", "_second", "total")

    def __init__(self) -> None:
        self._counts = [0] * 60
        self._second = 0
        self.total = 0

    def _advance(self, now: float) -> None:
        second = int(now)
        if second <= self._second:
            return
        counts = self._counts
        for s in range(max(self._second + 1, second - 59), second + 1):
            slot = s % 60
            self.total -= counts[slot]
            counts[slot] = 0
        self._second = second

    def add(self, now: float, n: int) -> None:
        self._advance(now)
        self._counts[self._second % 60] += n
        self.total += n

    def used(self, now: float) -> int:
        self._advance(now)
        return self.total

    def frees_in(self, now: float) -> float:
        """Seconds until the oldest count leaves the window."""
        self._advance(now)
        for s in range(self._second - 59, self._second + 1):
            if self._counts[s % 60]:
                return max(s + 60 - now, 0.0)
        return 0.0


# (health, reason, until, model or None, first time in this state)
OnChange = Callable[["KeyHealth", str, float, "str | None", bool], None]


class KeyHealth:
    """Everything the balancer knows about one key. Owned by the router; read and updated
    by the actors of one process (one event loop: no locks)."""

    __slots__ = (
        "_policy",
        "block",
        "blocked_until",
        "clear",
        "cooling",
        "ewma_ttft",
        "failures",
        "inflight",
        "label",
        "on_change",
        "opens",
        "probing",
        "provider",
        "requests",
        "rpm",
        "shared_cooling",
        "shared_reason",
        "shared_until",
        "store_key",
        "tokens",
        "tpm",
    )

    def __init__(
        self,
        provider: str,
        label: str,
        policy: HealthPolicy,
        *,
        rpm: int | None = None,
        tpm: int | None = None,
        store_key: str = "",
    ) -> None:
        self.provider = provider
        self.label = label  # the key's configured name or its fingerprint, never the secret
        self.store_key = store_key
        self._policy = policy
        self.rpm = rpm
        self.tpm = tpm
        self.failures = 0  # consecutive server-side failures
        self.opens = 0  # consecutive circuit opens: the backoff exponent
        self.block: str | None = None  # AUTH_FAILED | CIRCUIT_OPEN
        self.blocked_until = 0.0  # then half-open
        self.probing = False  # the half-open probe is in flight
        self.cooling: dict[str, float] = {}  # upstream model -> end of its rate-limit cooldown
        self.shared_until = 0.0  # a key-level hold another process wrote to the store
        self.shared_reason = ""
        self.shared_cooling: dict[str, float] = {}
        self.inflight = 0
        self.ewma_ttft: float | None = None
        self.requests = MinuteWindow()
        self.tokens = MinuteWindow()
        self.on_change: OnChange | None = None
        self.clear = True  # nothing restricts this key: the hot path skips every check
        self._refresh()

    def reconfigure(
        self, label: str, policy: HealthPolicy, *, rpm: int | None, tpm: int | None
    ) -> None:
        """The same key under a reloaded config: its new name, thresholds and limits; what
        it went through (holds, cooldowns, windows, EWMA, attempts in flight) stays."""
        self.label, self._policy, self.rpm, self.tpm = label, policy, rpm, tpm
        self._refresh()

    def _refresh(self) -> None:
        self.clear = (
            self.block is None
            and not self.cooling
            and not self.shared_cooling
            and not self.shared_until
            and self.rpm is None
            and self.tpm is None
        )

    # --- may it be tried? ------------------------------------------------------------------

    def wait_s(self, now: float, model: str) -> float:
        """0 when an attempt on `model` may start now, else how long until it may."""
        if self.clear:
            return 0.0
        wait = 0.0
        if self.block is not None:
            if now < self.blocked_until:
                wait = self.blocked_until - now
            elif self.probing:
                wait = PROBE_WAIT_S
        if self.shared_until:
            if now < self.shared_until:
                wait = max(wait, self.shared_until - now)
            else:
                self.shared_until, self.shared_reason = 0.0, ""
                self._refresh()
        wait = max(wait, self._cooling_wait(self.cooling, now, model))
        wait = max(wait, self._cooling_wait(self.shared_cooling, now, model))
        if self.rpm is not None and self.requests.used(now) >= self.rpm:
            wait = max(wait, self.requests.frees_in(now))
        if self.tpm is not None and self.tokens.used(now) >= self.tpm:
            wait = max(wait, self.tokens.frees_in(now))
        return wait

    def _cooling_wait(self, cooling: dict[str, float], now: float, model: str) -> float:
        until = cooling.get(model)
        if until is None:
            return 0.0
        if now < until:
            return until - now
        del cooling[model]
        self._refresh()
        return 0.0

    def rate_limited_only(self, now: float, model: str) -> bool:
        """True when what keeps this key from `model` now is rate limits alone (a 429
        cooldown or its rpm/tpm), not an auth hold or an open circuit."""
        if self.block is not None and (now < self.blocked_until or self.probing):
            return False
        return not (now < self.shared_until and self.shared_reason != RATE_LIMITED)

    def refusal(self, now: float, model: str) -> tuple[float, bool]:
        """(how long until `model` may be tried, whether only rate limits stand in the way)."""
        return self.wait_s(now, model), self.rate_limited_only(now, model)

    def begin(self, now: float, model: str) -> int:
        """Admit an attempt (REFUSED, ADMITTED or PROBE); the caller must end an admitted
        one with exactly one of the outcome methods, passing the ticket back."""
        if not self.clear and self.wait_s(now, model) > 0:
            return REFUSED
        ticket = ADMITTED
        if self.block is not None:
            self.probing = True
            ticket = PROBE
        self.inflight += 1
        self.requests.add(now, 1)
        return ticket

    # --- outcomes ----------------------------------------------------------------------------

    def _end(self, ticket: int) -> None:
        self.inflight -= 1
        if ticket == PROBE:
            self.probing = False

    def _alive(self) -> None:
        """The upstream answered sanely with this key: failures reset, any hold ends."""
        self.failures = 0
        if self.block is not None:
            block = self.block
            self.block, self.blocked_until, self.opens = None, 0.0, 0
            self._refresh()
            if self.on_change is not None:
                self.on_change(self, RECOVERED, 0.0, None, block == AUTH_FAILED)

    def succeeded(self, ticket: int, ttft_s: float | None, tokens: int, now: float) -> None:
        self._end(ticket)
        self._alive()
        if ttft_s is not None:
            last = self.ewma_ttft
            self.ewma_ttft = ttft_s if last is None else last + EWMA_ALPHA * (ttft_s - last)
        if tokens:
            self.tokens.add(now, tokens)

    def answered(self, ticket: int) -> None:
        """A client-caused 4xx: the upstream is alive; nothing counts against the key."""
        self._end(ticket)
        self._alive()

    def released(self, ticket: int) -> None:
        """The attempt ended for a reason that says nothing about the key (client gone)."""
        self._end(ticket)

    def rate_limited(
        self, ticket: int, now: float, model: str, retry_after_s: float | None
    ) -> None:
        self._end(ticket)
        self._alive()
        wait = self._policy.cooldown_s if retry_after_s is None else retry_after_s
        until = now + wait
        if len(self.cooling) >= MAX_COOLING_MODELS and model not in self.cooling:
            self._purge_cooling(now)
        self.cooling[model] = until
        self.clear = False
        if self.on_change is not None:
            self.on_change(self, RATE_LIMITED, until, model, True)

    def _purge_cooling(self, now: float) -> None:
        for name in [m for m, until in self.cooling.items() if until <= now]:
            del self.cooling[name]
        while len(self.cooling) >= MAX_COOLING_MODELS:
            del self.cooling[next(iter(self.cooling))]

    def auth_failed(self, ticket: int, now: float) -> None:
        self._end(ticket)
        first = self.block != AUTH_FAILED
        self.block, self.blocked_until = AUTH_FAILED, now + self._policy.auth_hold_s
        self.opens = 0
        self.clear = False
        if self.on_change is not None:
            self.on_change(self, AUTH_FAILED, self.blocked_until, None, first)

    def server_failed(self, ticket: int, now: float) -> None:
        self._end(ticket)
        self.failures += 1
        if self.block is None:
            if self.failures < self._policy.circuit_failures:
                return
        elif now < self.blocked_until:
            return  # an attempt that began before the hold: the hold already stands
        elif self.block == AUTH_FAILED:
            # the auth probe proved nothing either way: hold the key again
            self.blocked_until = now + self._policy.auth_hold_s
            return
        self._open(now)

    def unusable(self, ticket: int, now: float) -> None:
        """The key's credential could not be had (a cloud identity's token endpoint down):
        nothing reached the upstream, and nothing will until it can, so the circuit opens
        at once instead of after `circuit_failures`; its backoff paces the retries."""
        self._end(ticket)
        self.failures += 1
        if self.block is not None and now < self.blocked_until:
            return
        self._open(now)

    def _open(self, now: float) -> None:
        p = self._policy
        self.opens += 1
        first = self.block != CIRCUIT_OPEN
        period = min(p.circuit_open_s * 2.0 ** min(self.opens - 1, 32), p.circuit_max_open_s)
        self.block, self.blocked_until = CIRCUIT_OPEN, now + period
        self.clear = False
        if self.on_change is not None:
            self.on_change(self, CIRCUIT_OPEN, self.blocked_until, None, first)

    # --- what other processes saw --------------------------------------------------------------

    def mirror(self, until: float, reason: str, cooling: dict[str, float]) -> None:
        """Replace the holds other processes wrote (`until` 0: none) with what the store says."""
        self.shared_until, self.shared_reason = until, reason if until else ""
        self.shared_cooling = cooling
        self._refresh()

    # --- what /admin/health shows --------------------------------------------------------------

    def state(self, now: float) -> str:
        if self.block is not None:
            if now < self.blocked_until:
                return self.block
            return "half_open"
        if now < self.shared_until:
            return self.shared_reason or "held"
        return "healthy"
