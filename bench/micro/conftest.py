"""Per-event figures for the microbenchmarks.

Each benchmark round processes a whole stream; `per_event(n)` records how many events (or
chunks, or deltas) one round handles, in `benchmark.extra_info["events_per_round"]` (so it is
in `--benchmark-json` output too), and the terminal summary prints a second table with the
round times divided by it: microseconds per event.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

_RECORDED = pytest.StashKey[list[tuple[str, Any, int]]]()


@pytest.fixture
def per_event(benchmark: Any, request: pytest.FixtureRequest) -> Callable[[int], None]:
    def record(events: int) -> None:
        assert events > 0
        benchmark.extra_info["events_per_round"] = events
        request.config.stash.setdefault(_RECORDED, []).append(
            (request.node.name, benchmark, events)
        )

    return record


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    rows = []
    for name, fixture, events in config.stash.get(_RECORDED, []):
        metadata = getattr(fixture, "stats", None)
        if not metadata:  # benchmarks disabled, or the test failed before measuring
            continue
        stats = metadata.stats
        rows.append(
            (
                name,
                events,
                stats.min * 1e6 / events,
                stats.median * 1e6 / events,
                stats.mean * 1e6 / events,
                stats.median * 1e6,
            )
        )
    if not rows:
        return
    width = max(len(r[0]) for r in rows)
    terminalreporter.write_sep("-", "per event (round time / events per round)")
    terminalreporter.write_line(
        f"{'benchmark':<{width}}  {'events':>6}  {'min us/ev':>9}  {'median us/ev':>12}  "
        f"{'mean us/ev':>10}  {'median us/round':>15}"
    )
    for name, events, lo, med, mean, per_round in sorted(rows):
        terminalreporter.write_line(
            f"{name:<{width}}  {events:>6}  {lo:>9.3f}  {med:>12.3f}  {mean:>10.3f}  "
            f"{per_round:>15.1f}"
        )
