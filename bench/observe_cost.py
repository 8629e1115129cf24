"""What the request log and tracing cost: `bench.load --full` with each `--observe` mode,
interleaved in one run on this machine.

    python -m bench.observe_cost [--modes none,log-sqlite,log-postgres,tracing] [--rounds 3]
                                 [--max-total 1500] [-- <more bench.load args>]

Each round runs every mode once, in an order rotated by one each round (so a machine slowly
getting faster or slower biases no mode); every run is `bench.load --full --connections 16
--observe MODE` plus the extra args. Prints per (cell, mode) the median requests/s and CPU per
request over the rounds and the ratio to `none`, and writes everything to
bench/results/observe-<UTC>.json. The issue's bar: the log at most 10% of the throughput,
tracing (sample_ratio 1.0) at most 15%. The response cache's cell: `--modes
none,cache-hit,cache-miss -- --connections 1,16` (a hit: at most 0.3 ms added at one
connection, at least twice a miss's requests/s at 16).
Exit status: 0 every run succeeded, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path

from bench.interleave import REPO
from bench.interleave import RESULTS_DIR
from bench.interleave import cell_metrics
from bench.interleave import log
from bench.interleave import run_load
from bench.load_full import OBSERVE_MODES


def render(runs: dict[str, list[dict[str, dict[str, float]]]]) -> str:
    lines = [
        "| cell | mode | rps median | rps / none | CPU us/request | CPU / none | rps spread"
        " | added p50 ms |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    base_runs = runs.get("none") or next(iter(runs.values()))
    for cell in base_runs[0]:
        base_rps = statistics.median(r[cell]["gateway_rps"] for r in base_runs if cell in r)
        base_cpu = statistics.median(r[cell]["cpu_us_per_request"] for r in base_runs if cell in r)
        for mode, reports in runs.items():
            rps = [r[cell]["gateway_rps"] for r in reports if cell in r]
            cpu = [r[cell]["cpu_us_per_request"] for r in reports if cell in r]
            if not rps:
                continue
            mid, mid_cpu = statistics.median(rps), statistics.median(cpu)
            added = statistics.median(r[cell]["added_p50_ms"] for r in reports if cell in r)
            width = (max(rps) - min(rps)) / mid * 100 if len(rps) > 1 and mid else 0.0
            lines.append(
                f"| {cell} | {mode} | {mid:,.0f} | {mid / base_rps:.3f} | {mid_cpu:.0f} | "
                f"{mid_cpu / base_cpu if base_cpu else 0:.3f} | {width:.0f}% | {added:.3f} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    extra: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, extra = args[:at], args[at + 1 :]
    parser = argparse.ArgumentParser(prog="python -m bench.observe_cost", description=__doc__)
    parser.add_argument("--modes", default="none,log-sqlite,tracing")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-total", type=float, default=1500.0, help="seconds, all runs")
    options = parser.parse_args(args)
    modes = [m for m in options.modes.split(",") if m]
    unknown = [m for m in modes if m not in OBSERVE_MODES]
    if unknown or not 1 <= options.rounds <= 10:
        parser.error(f"modes among {OBSERVE_MODES}, rounds 1..10 (unknown: {unknown})")
    started = time.monotonic()
    runs: dict[str, list[dict[str, dict[str, float]]]] = {m: [] for m in modes}
    failed = False
    with tempfile.TemporaryDirectory(prefix="bench-observe-") as tmp:
        for round_no in range(options.rounds):
            order = modes[round_no % len(modes) :] + modes[: round_no % len(modes)]
            for mode in order:
                if time.monotonic() - started > options.max_total:
                    log("--max-total reached: no more runs")
                    failed = True
                    break
                load_args = ["--full", "--connections", "16", "--observe", mode, *extra]
                try:
                    report = run_load(mode, REPO, load_args, Path(tmp))
                except Exception as error:  # one failed run fails the whole, after the rest
                    log(f"{mode}: {error}")
                    failed = True
                    continue
                runs[mode].append(cell_metrics(report))
    finished = {m: r for m, r in runs.items() if r}
    if not finished:
        log("no run finished: nothing to compare")
        return 1
    table = render(finished)
    print(table)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out = RESULTS_DIR / f"observe-{stamp}.json"
    out.write_text(json.dumps({"modes": modes, "extra": extra, "runs": runs, "table": table}))
    print(f"results: {out.relative_to(REPO)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
