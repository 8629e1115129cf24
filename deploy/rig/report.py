"""The rig's settings and figures: what `make rig` prints, what tests/rig/ asserts.

`Report.problems()` lists every property that did not hold; `make rig` exits 1 when it is
not empty. Each check compares measured numbers with what the property demands, never with
numbers the rig was told to produce.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.load_wrk import WrkRun
from deploy.rig.client import RESTART_MIX, Kind, Load, Outcome


@dataclass(frozen=True)
class Settings:
    load_s: float  # each of the direct and nginx loads
    concurrency: int  # the direct, nginx and restart loads
    background_concurrency: int  # the load through nginx while the limits are driven
    limit_concurrency: int
    rpm: int  # the rpm key's limit
    rpm_requests: int  # sent with the rpm key, more than its rpm
    budget_usd: float  # the budget key's budget
    budget_requests: int  # sent with the budget key, more than its budget pays for
    max_requests: int = 50_000  # per load: each is bounded in count as well as in time
    wrk_s: int = 0  # seconds of each wrk run (0: none)
    shutdown_grace_s: float = 10.0
    restart_mix: tuple[Kind, ...] = RESTART_MIX


# `make rig`: about a minute and a half of load. tests/rig/: the same properties, smaller.
FULL = Settings(
    load_s=20.0,
    concurrency=32,
    background_concurrency=8,
    limit_concurrency=16,
    rpm=60,
    rpm_requests=150,
    budget_usd=0.02,
    budget_requests=150,
    wrk_s=8,
)
SMALL = Settings(
    load_s=3.0,
    concurrency=8,
    background_concurrency=4,
    limit_concurrency=8,
    rpm=20,
    rpm_requests=50,
    budget_usd=0.006,
    budget_requests=50,
    max_requests=5_000,
)


@dataclass
class Limits:
    a: str  # gateway A's URL
    b: str
    background: Load
    rpm: Load
    budget: Load
    budget_tail: list[Outcome]  # then one request at a time until one is refused
    spend: list[dict[str, Any]]  # GET /admin/keys/cfg-rig-budget, asked of A then of B
    reserve_usd: float  # the most one budget-key request reserves

    def all_outcomes(self) -> list[Outcome]:
        loads = (self.background, self.rpm, self.budget)
        return [*(o for load in loads for o in load.outcomes), *self.budget_tail]

    def admitted(self, base: str) -> int:
        return sum(o.ok for o in self.rpm.outcomes if o.base == base)

    def refused(self, load: Load, code: str) -> int:
        return sum(o.status == 429 and o.code == code for o in load.outcomes)

    @property
    def spend_usd(self) -> float:
        return float(self.spend[0]["spend_usd"])

    @property
    def budget_outcomes(self) -> list[Outcome]:
        return [*self.budget.outcomes, *self.budget_tail]

    @property
    def client_cost_usd(self) -> float:
        return sum(o.cost_usd or 0.0 for o in self.budget_outcomes if o.ok)


@dataclass
class PrometheusFigures:
    up: dict[str, float]  # target -> `up`
    gateway_counts: dict[str, int]  # status class -> chat requests counted by the gateways
    client_counts: dict[str, int]  # status class -> chat requests the client sent
    per_target: dict[str, int]


@dataclass
class Restart:
    name: str
    address: str
    readyz_before: int | None = None
    readyz_draining: int | None = None  # on a connection opened before the SIGTERM
    readyz_body: str = ""
    sigterm_at: float = 0.0  # time.monotonic()
    exit_code: int | None = None  # None: still running long after SIGTERM, then aborted
    stuck_log: str = ""  # the end of its log then, with the stacks of its threads
    drain_s: float = 0.0  # SIGTERM -> process exited
    ready_again_s: float = 0.0  # SIGTERM -> the new process's /readyz 200
    back_in_rotation_s: float = 0.0  # ready -> nginx sends it a request
    in_flight: list[Outcome] = field(default_factory=list)

    def count_in_flight(self, outcomes: list[Outcome]) -> None:
        """The requests this gateway was answering when it got SIGTERM."""
        self.in_flight = [
            o
            for o in outcomes
            if o.served_by(self.address) and o.started < self.sigterm_at < o.ended
        ]

    @property
    def in_flight_streams(self) -> list[Outcome]:
        return [o for o in self.in_flight if o.kind.stream]

    @property
    def committed_in_flight(self) -> list[Outcome]:
        """Streams whose headers the client had before the SIGTERM: past the point where
        nginx could have sent them to the other gateway."""
        at = self.sigterm_at
        return [o for o in self.in_flight_streams if o.answered is not None and o.answered < at]


@dataclass
class Report:
    settings: Settings
    direct: Load
    through: Load
    limits: Limits
    prometheus: PrometheusFigures
    restart_load: Load
    restarts: list[Restart]
    wrk: list[WrkRun] = field(default_factory=list)

    @property
    def retried_by_nginx(self) -> int:
        """Requests nginx handed to the other gateway after a failed first try."""
        return sum(", " in o.upstream for o in self.restart_load.outcomes)

    def problems(self) -> list[str]:
        found: list[str] = []
        loads = {
            "direct": self.direct,
            "nginx": self.through,
            "background": self.limits.background,
            "restart": self.restart_load,
        }
        for name, load in loads.items():
            if not load.outcomes:
                found.append(f"{name} load: no requests")
            if load.failures:
                first = load.failures[0]
                found.append(f"{name} load: {len(load.failures)} failed, e.g. {first.failure}")
        found += self._limit_problems()
        prom = self.prometheus
        if sorted(prom.up.values()) != [1.0, 1.0]:
            found.append(f"prometheus: targets not both up: {prom.up}")
        if prom.gateway_counts != prom.client_counts:
            found.append(f"prometheus counts {prom.gateway_counts} != client {prom.client_counts}")
        for restart in self.restarts:
            found += _restart_problems(restart)
        found += [f"wrk {run.target}: {problem}" for run in self.wrk for problem in run.problems]
        return found

    def _limit_problems(self) -> list[str]:
        limits, settings, found = self.limits, self.settings, []
        a, b = limits.admitted(limits.a), limits.admitted(limits.b)
        rpm_refused = limits.refused(limits.rpm, "rate_limit_exceeded")
        if a + b != settings.rpm or not (a and b):
            found.append(f"rpm {settings.rpm}: admitted {a} on A + {b} on B")
        if a + b + rpm_refused != len(limits.rpm.outcomes):
            found.append(f"rpm key: answers other than 200 or 429: {limits.rpm.failures[:1]}")
        served = sum(o.ok for o in limits.budget.outcomes)
        budget_refused = limits.refused(limits.budget, "budget_exceeded")
        if not served or not budget_refused or served + budget_refused != settings.budget_requests:
            found.append(f"budget key: {served} served, {budget_refused} budget_exceeded")
        spends = {(s["spend_nanos"], s["reserved_usd"]) for s in limits.spend}
        if len(spends) != 1:
            found.append(f"budget key: A and B disagree: {limits.spend}")
        last = limits.budget_tail[-1]
        if last.code != "budget_exceeded" or not all(o.ok for o in limits.budget_tail[:-1]):
            found.append(f"budget key: one at a time after the load, ending with {last}")
        if limits.spend_usd > settings.budget_usd + limits.reserve_usd:
            found.append(f"budget key: spent {limits.spend_usd} > budget + one reserve")
        if abs(limits.client_cost_usd - limits.spend_usd) > 1e-9 * max(served, 1):
            found.append(f"budget key: clients saw {limits.client_cost_usd}, spend says more/less")
        if float(limits.spend[0]["reserved_usd"]) != 0.0:
            found.append(f"budget key: reservations left after the load: {limits.spend[0]}")
        return found

    def summary(self, command: str) -> str:
        s, lim, prom = self.settings, self.limits, self.prometheus
        lines = [
            f"== rig summary: {command} ==",
            f"steady load, concurrency {s.concurrency}, {s.load_s:g} s each: streams (text, two "
            "parallel tool calls, text then a call) and non-streaming, 3:1; every answer checked",
            f"  {'':<36}{'requests':>9}{'RPS':>9}{'p50 ms':>9}{'p99 ms':>9}{'failed':>8}",
        ]
        for label, load in (("direct to gateway A", self.direct), ("nginx -> A + B", self.through)):
            lines.append(
                f"  {label:<36}{len(load.outcomes):>9}{load.rps:>9.1f}"
                f"{load.percentile_ms(0.5):>9.1f}{load.percentile_ms(0.99):>9.1f}"
                f"{len(load.failures):>8}"
            )
        if self.wrk:
            lines.append(
                f"wrk, {s.concurrency} connections, {s.wrk_s} s each (status codes only; the "
                "streams are the two-tool-call scenario)"
            )
        for run in self.wrk:
            failed = run.non_2xx + run.socket_errors
            lines.append(
                f"  {run.target:<36}{run.requests:>9}{run.rps:>9.1f}{run.p50_ms:>9.1f}"
                f"{run.p99_ms:>9.1f}{failed:>8}"
            )
        load = self.restart_load
        lines += [
            f"rolling restart through nginx, concurrency {s.concurrency}, the same requests "
            "and one stream in five lasting ~1 s:",
            f"  requests {len(load.outcomes)} ({load.streams} streams), failed "
            f"{len(load.failures)}, handed to the other gateway by nginx {self.retried_by_nginx}",
        ]
        for r in self.restarts:
            done = sum(o.ok for o in r.in_flight_streams)
            lines.append(
                f"  {r.name}: /readyz {r.readyz_before} -> {r.readyz_draining} draining; "
                f"{_exit_text(r)} after {r.drain_s:.2f} s; streams in flight at SIGTERM "
                f"{len(r.in_flight_streams)} ({len(r.committed_in_flight)} committed), "
                f"completed {done}; ready again "
                f"{r.ready_again_s:.2f} s, in nginx's rotation +{r.back_in_rotation_s:.2f} s"
            )
        bg = lim.background
        lines += [
            f"limits, requests alternating A and B directly, under a load through nginx "
            f"({len(bg.outcomes)} requests, failed {len(bg.failures)}):",
            f"  rpm key (rpm {s.rpm}): sent {len(lim.rpm.outcomes)}, admitted "
            f"{lim.admitted(lim.a) + lim.admitted(lim.b)} (A {lim.admitted(lim.a)}, B "
            f"{lim.admitted(lim.b)}), 429 rate_limit_exceeded "
            f"{lim.refused(lim.rpm, 'rate_limit_exceeded')}",
            f"  budget key (${s.budget_usd:g}): sent {len(lim.budget.outcomes)}, served "
            f"{sum(o.ok for o in lim.budget.outcomes)}, 429 budget_exceeded "
            f"{lim.refused(lim.budget, 'budget_exceeded')}, then one at a time: "
            f"{len(lim.budget_tail) - 1} served before a {lim.budget_tail[-1].status} "
            f"{lim.budget_tail[-1].code}; settled ${lim.spend_usd:.6f} "
            f"(A and B agree: {len({str(x['spend_nanos']) for x in lim.spend}) == 1}), limit + "
            f"one reserve ${s.budget_usd + lim.reserve_usd:.6f}; cost the clients saw "
            f"${lim.client_cost_usd:.6f}",
            f"prometheus: up {sorted(prom.up.values())}; chat requests counted by the gateways "
            f"{dict(sorted(prom.gateway_counts.items()))} (per target "
            f"{sorted(prom.per_target.values())}), sent by the client "
            f"{dict(sorted(prom.client_counts.items()))}",
        ]
        problems = self.problems()
        lines.append("result: every property held" if not problems else "result: FAILED")
        lines += [f"  - {problem}" for problem in problems]
        return "\n".join(lines)


def _exit_text(r: Restart) -> str:
    return f"exit {r.exit_code}" if r.exit_code is not None else "still running, aborted"


def _restart_problems(r: Restart) -> list[str]:
    found = []
    if (r.readyz_before, r.readyz_draining) != (200, 503):
        found.append(
            f"{r.name}: /readyz {r.readyz_before} then {r.readyz_draining} {r.readyz_body}"
        )
    if r.exit_code is None:
        found.append(f"{r.name}: still running long after SIGTERM; its log:\n{r.stuck_log}")
    elif r.exit_code != 0:
        found.append(f"{r.name}: exited with {r.exit_code} after SIGTERM")
    if not r.committed_in_flight:
        found.append(f"{r.name}: no committed stream in flight at SIGTERM: nothing was proved")
    failed = [o for o in r.in_flight if not o.ok]
    if failed:
        found.append(f"{r.name}: {len(failed)} in-flight requests failed: {failed[0].failure}")
    return found
