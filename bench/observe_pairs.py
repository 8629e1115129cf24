"""What the request log, tracing and the response cache cost, measured side by side: one
gateway per `--observe` mode, all running at once, and short wrk slices that rotate over them.

    python -m bench.observe_pairs [--modes none,log-sqlite,log-postgres,tracing] [--rounds 8]
        [--slice 4] [--connections 16] [--max-total 1500]

bench.observe_cost runs each mode as its own `bench.load` run of half a minute; on a shared
machine whose speed drifts by tens of percent between minutes, that drift is larger than what
it measures. Here every mode's gateway (with its fake upstream, and a PostgreSQL or an OTLP
collector of its own) is started first, pinned as bench.load pins them (gateways on one CPU,
everything else on the other); then each round measures every (stream mode, connections)
cell once per mode, back to back, `--slice` seconds each, in an order rotated by one every
round, and the direct upstream once beside them. A mode's ratio to `none` is taken within a
round (slices seconds apart, so under the same drift) and the median over the rounds is
reported, with the pooled ratio (all of a mode's requests over all of `none`'s) beside it.
Gateways not under load sit idle (every slice starts once all processes are). Added p50 is a
slice's gateway p50 less the round's direct p50 of the same cell.

The cells are what `bench.load --full` measures (sqlite store, a virtual key, two provider
keys, 20 content chunks per stream). Prints the table, writes bench/results/observe-pairs-
<UTC>.json. Exit status: 0 every slice passed, 1 some slice failed or --max-total cut the
rounds short, 2 setup failed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path

from bench.load import MODES
from bench.load import LoadBench
from bench.load import Settings
from bench.load import SetupError
from bench.load import log
from bench.load_full import OBSERVE_MODES
from bench.load_procs import Pinning
from bench.load_procs import wait_idle
from bench.load_report import REPO
from bench.load_wrk import WrkRun
from bench.load_wrk import wrk_version

RESULTS_DIR = REPO / "bench" / "results"
DIRECT = "direct"


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.observe_pairs",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--modes", default="none,log-sqlite,log-postgres,tracing")
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--slice", type=int, default=4, help="seconds of load per slice")
    parser.add_argument("--connections", default="16", help="comma-separated counts")
    parser.add_argument("--max-total", type=float, default=1500.0, help="seconds, all slices")
    options = parser.parse_args(argv)
    options.modes = [m for m in options.modes.split(",") if m]
    unknown = [m for m in options.modes if m not in OBSERVE_MODES]
    if unknown or "none" not in options.modes:
        parser.error(f"--modes: among {OBSERVE_MODES}, `none` included (unknown: {unknown})")
    if not 1 <= options.rounds <= 30 or not 1 <= options.slice <= 60:
        parser.error("--rounds 1..30, --slice 1..60")
    options.connections = tuple(int(c) for c in options.connections.split(",") if c)
    return options


class Side:
    """One mode's gateway and what wrk must send it."""

    def __init__(self, mode: str, bench: LoadBench) -> None:
        self.mode = mode
        self.bench = bench

    def use(self) -> None:
        """bench/wrk_chat.lua reads these as wrk starts: this gateway's key, and (cache-miss)
        a different question every request."""
        os.environ["BENCH_KEY"] = self.bench.bearer
        if self.mode == "cache-miss":
            os.environ["BENCH_UNIQUE"] = "1"
        else:
            os.environ.pop("BENCH_UNIQUE", None)


def summarise(
    slices: list[dict[str, object]], modes: list[str]
) -> tuple[list[dict[str, object]], str]:
    """Per (cell, mode): the median within-round ratio to `none` and the pooled one."""
    by: dict[tuple[str, str], dict[int, dict[str, object]]] = {}
    for s in slices:
        by.setdefault((str(s["cell"]), str(s["mode"])), {})[int(str(s["round"]))] = s
    cells = sorted({str(s["cell"]) for s in slices}, key=lambda c: (c.startswith("stream"), c))
    rows: list[dict[str, object]] = []
    lines = [
        "| cell | mode | rps median | rps / none (median of rounds) | pooled | spread of ratio"
        " | CPU us/request | CPU / none | added p50 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for cell in cells:
        base = by.get((cell, "none"), {})
        direct = by.get((cell, DIRECT), {})
        for mode in modes:
            mine = by.get((cell, mode), {})
            rounds = [r for r in mine if r in base]
            if not rounds:
                continue

            def value(side: dict[int, dict[str, object]], r: int, name: str) -> float:
                return float(str(side[r][name]))

            ratios = [value(mine, r, "rps") / value(base, r, "rps") for r in rounds]
            cpu = [value(mine, r, "cpu_us") / value(base, r, "cpu_us") for r in rounds]
            pooled = sum(value(mine, r, "rps") for r in rounds) / sum(
                value(base, r, "rps") for r in rounds
            )
            added = [
                value(mine, r, "p50_ms") - value(direct, r, "p50_ms") for r in rounds if r in direct
            ]
            ratio = statistics.median(ratios)
            row = {
                "cell": cell,
                "mode": mode,
                "rounds": len(rounds),
                "rps_median": statistics.median(value(mine, r, "rps") for r in rounds),
                "ratio_median": ratio,
                "ratio_pooled": pooled,
                "ratio_spread": (max(ratios) - min(ratios)) / ratio if ratio else 0.0,
                "cpu_us_median": statistics.median(value(mine, r, "cpu_us") for r in rounds),
                "cpu_ratio_median": statistics.median(cpu),
                "added_p50_ms": statistics.median(added) if added else None,
            }
            rows.append(row)
            added_text = "" if row["added_p50_ms"] is None else f"{row['added_p50_ms']:.3f}"
            lines.append(
                f"| {cell} | {mode} | {row['rps_median']:,.0f} | {ratio:.3f} | {pooled:.3f} | "
                f"{row['ratio_spread'] * 100:.0f}% | {row['cpu_us_median']:.0f} | "
                f"{row['cpu_ratio_median']:.3f} | {added_text} |"
            )
    return rows, "\n".join(lines)


def slice_record(run: WrkRun, mode: str, cell: str, round_no: int) -> dict[str, object]:
    share = run.cpu.get("gateway" if mode != DIRECT else "fake_upstream", 0.0) / 100
    return {
        "round": round_no,
        "cell": cell,
        "mode": mode,
        "rps": run.rps,
        "p50_ms": run.p50_ms,
        "p99_ms": run.p99_ms,
        "cpu_us": share / run.rps * 1e6 if run.rps else 0.0,
        "cpu_percent": run.cpu,  # of one core, each process of this mode's side
        "ok": run.ok,
        "problems": run.problems,
    }


def measure_rounds(
    sides: list[Side], options: argparse.Namespace, started: float
) -> tuple[list[dict[str, object]], bool]:
    services = [s for side in sides for s in side.bench.services]
    slices: list[dict[str, object]] = []
    failed = False
    for round_no in range(options.rounds):
        shift = round_no % len(sides)
        order = sides[shift:] + sides[:shift]
        for mode in MODES:
            for conns in options.connections:
                cell = f"{mode} c={conns}"
                for side, target in [(order[0], DIRECT)] + [(s, "gateway") for s in order]:
                    if time.monotonic() - started > options.max_total:
                        log("--max-total reached: no more slices")
                        return slices, True
                    side.use()
                    wait_idle(services)
                    run = side.bench.measure(target, mode, conns, options.slice)
                    name = DIRECT if target == DIRECT else side.mode
                    slices.append(slice_record(run, name, cell, round_no))
                    failed |= not run.ok
                    log(
                        f"round {round_no + 1} {cell} {name:<12} {run.rps:>8,.0f} rps "
                        f"p50 {run.p50_ms:.3f} ms"
                        + ("" if run.ok else " FAIL: " + "; ".join(run.problems))
                    )
    return slices, failed


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    if wrk_version() is None:
        print("wrk is not on PATH; run: bash bench/install_deps.sh", file=sys.stderr)
        return 2
    cpus_allowed = sorted(os.sched_getaffinity(0))
    pinning = Pinning.detect(True)
    if pinning.load_cpu is not None:
        os.sched_setaffinity(0, {pinning.load_cpu})
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    log(f"pinning: {pinning.describe()}")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    sides: list[Side] = []
    with tempfile.TemporaryDirectory(prefix="bench-pairs-") as tmp:
        try:
            for mode in options.modes:
                settings = Settings(
                    duration_s=options.slice,
                    connections=options.connections,
                    warmup_s=2,
                    chunks=20,
                    direct_only=False,
                    pin=True,
                    ready_timeout_s=60.0,
                    full=True,
                    observe=mode,
                )
                workdir = Path(tmp) / mode
                workdir.mkdir()
                side = Side(mode, LoadBench(settings, pinning, workdir, cpus_allowed))
                sides.append(side)
                side.bench.start()
                side.use()
                side.bench.verify()
                side.bench.warm_up()
            started = time.monotonic()
            slices, failed = measure_rounds(sides, options, started)
        except SetupError as error:
            print(f"bench.observe_pairs: setup failed: {error}", file=sys.stderr)
            return 2
        finally:
            for side in reversed(sides):
                side.bench.stop()
    rows, table = summarise(slices, options.modes)
    print(table)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"observe-pairs-{stamp}.json"
    report = {
        "benchmark": "bench.observe_pairs",
        "modes": options.modes,
        "rounds": options.rounds,
        "slice_s": options.slice,
        "connections": list(options.connections),
        "pinning": pinning.describe(),
        "summary": rows,
        "slices": slices,
        "table": table,
    }
    out.write_text(json.dumps(report, indent=1))
    print(f"results: {out.relative_to(REPO)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
