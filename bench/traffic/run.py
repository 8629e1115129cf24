"""The traffic benchmark's orchestrator (docs/benchmarks.md, "Real traffic shape").

    python -m bench.traffic.run [--scenario streams,long,held,prompt,tools]
        [--targets direct,ours,litellm,portkey] [--rounds 1] [--duration 20] [--max-total 1500]
        [--quick] [--calibrate] [--ours-workers N] [--out-dir DIR]

Per round and scenario: starts the paced fake upstream (bench.traffic.upstream) pinned to the
load CPU with the scenario's shape; then per target (in order, reversed on even rounds so drift
cancels): starts it pinned to the gateway CPU, waits until it answers a chat request, warms it
up (targets.warm_up), measures its idle RSS, runs the scenario's cells (cell.py), stops it by
its id. Then the upstream stops.
Writes results.json and table.md into bench/results/traffic-<UTC>/ (or --out-dir) and prints
the table. `--calibrate` instead runs `direct` alone at rising concurrency and reports the
harness's ceiling (also saved as bench/results/traffic-calibration.json, which every later run
prints). `--quick`: small counts, a few seconds per cell, direct and ours only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import sys
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.peers.compare import Proc
from bench.peers.compare import wait_idle
from bench.traffic import report
from bench.traffic import scenarios
from bench.traffic import targets
from bench.traffic.cell import run_cell

RESULTS = targets.REPO / "bench" / "results"
CALIBRATION_FILE = RESULTS / "traffic-calibration.json"


def log(message: str) -> None:
    print(f"[traffic {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_ports(count: int) -> int:
    """The first of `count` consecutive free loopback ports."""
    # from a random start: two runs at once (a test beside a matrix) should not collide
    start = random.randrange(21000, 39000)
    for base in range(start, start + 20000, 97):
        sockets = []
        try:
            for port in range(base, base + count):
                sock = socket.socket()
                sockets.append(sock)
                sock.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for sock in sockets:
                sock.close()
    raise SystemExit("no free ports")


class Upstream:
    """The paced fake upstream of one scenario: its process, port and stats ports."""

    def __init__(self, shape: scenarios.Shape, procs: int, cpu: str | None, run_dir: Path):
        base = free_ports(procs + 1)
        self.port, self.stats_ports = base, list(range(base + 1, base + 1 + procs))
        argv = [sys.executable, "-m", "bench.traffic.upstream", "--port", str(self.port)]
        argv += ["--stats-port", str(base + 1), "--procs", str(procs)]
        argv += ["--chunks", str(shape.chunks), "--interval-ms", str(shape.interval_ms)]
        argv += ["--size", str(shape.size)]
        if cpu:
            argv = ["taskset", "-c", cpu, *argv]
        self.proc = Proc(
            "upstream", argv, cwd=str(targets.REPO), logpath=str(run_dir / "upstream.log")
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if all(_get_ok(port, "/healthz") for port in [self.port, *self.stats_ports]):
                return
            if not self.proc.alive():
                break
            time.sleep(0.1)
        self.proc.stop()
        raise SystemExit("the fake upstream did not start: " + self.proc.tail())


def _get_ok(port: int, path: str) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", path)
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


def run_matrix(
    args: argparse.Namespace,
    plan: list[scenarios.Scenario],
    names: list[str],
    run_dir: Path,
    started: float,
) -> tuple[list[dict[str, Any]], list[str]]:
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    for round_index in range(args.rounds):
        order = names if round_index % 2 == 0 else list(reversed(names))
        for scenario in plan:
            if time.monotonic() - started > args.max_total:
                notes.append(f"--max-total {args.max_total}s reached: the table is partial")
                return results, notes
            log(f"round {round_index + 1} scenario {scenario.name}: upstream {scenario.shape}")
            upstream = Upstream(scenario.shape, args.upstream_procs, args.load_cpu, run_dir)
            try:
                for name in order:
                    _one_target(args, name, scenario, upstream, run_dir, started, results, notes)
            finally:
                upstream.proc.stop()
    return results, notes


def _one_target(
    args: argparse.Namespace,
    name: str,
    scenario: scenarios.Scenario,
    upstream: Upstream,
    run_dir: Path,
    started: float,
    results: list[dict[str, Any]],
    notes: list[str],
) -> None:
    target = targets.make_target(name, run_dir, upstream.port, args.gw_cpu, args.ours_workers)
    targets.start(target, run_dir, args.ready_timeout, upstream.proc.pid)
    try:
        if target.skip:
            notes.append(f"{name} ({scenario.name}) not measured: {target.skip}")
            log(f"!! {name} skipped: {target.skip}")
            return
        probe_cpu = args.load_cpu if name == "direct" else args.gw_cpu
        targets.warm_up(target, 2 if args.quick else 10)
        wait_idle([target.root_pid], max_wait=args.idle_wait)
        target.idle_rss_kb = target.rss_kb()
        log(
            f"{name} ready in {target.startup_s:.1f}s, idle RSS {target.idle_rss_kb / 1024:.0f} MiB"
        )
        for cell in scenario.cells:
            if time.monotonic() - started > args.max_total:
                notes.append(f"--max-total reached before {scenario.name} {cell.label} {name}")
                return
            result = run_cell(
                target,
                cell,
                upstream.stats_ports,
                args.load_cpu,
                probe_cpu,
                args.client_procs,
                args.ramp_per_s,
            )
            results.append(result)
            row = report.figures([result])[0]
            log(
                f"  {scenario.name} {cell.label} {name}: rps {report.fmt(row['rps'])}"
                f" ok {row['ok']}"
                f" errors {row['error_total']} {row['errors'] or ''} delay p99"
                f" {report.fmt(row['delay']['p99'])} ms, up late p99"
                f" {report.fmt(row['upstream_lateness']['p99'])} ms, {result['elapsed_s']:.0f}s"
            )
            if target.proc is not None and not target.proc.alive():
                notes.append(f"{name} exited during {scenario.name} {cell.label}")
                return
            wait_idle([target.root_pid], max_wait=args.idle_wait)
    finally:
        targets.stop(target)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.traffic.run",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--scenario", default=",".join(scenarios.SCENARIO_NAMES))
    parser.add_argument("--targets", default=",".join(targets.TARGET_NAMES))
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds per cell")
    parser.add_argument("--max-total", type=float, default=1500.0, help="bound on the run, s")
    parser.add_argument("--quick", action="store_true", help="smoke test: small, short")
    parser.add_argument("--calibrate", action="store_true", help="the harness's ceiling")
    parser.add_argument("--calibrate-conns", default="1000,2000,5000,10000")
    parser.add_argument("--ceiling-ms", type=float, default=5.0)
    parser.add_argument("--ours-workers", type=int, default=1)
    parser.add_argument("--upstream-procs", type=int, default=2)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--ramp-per-s", type=float, default=2000.0, help="new connections/s")
    parser.add_argument("--load-cpu", default="0", help="upstream + load generator CPU")
    parser.add_argument("--gw-cpu", default="1", help="the target's CPU")
    parser.add_argument("--no-pin", action="store_true")
    parser.add_argument("--ready-timeout", type=float, default=180.0)
    parser.add_argument("--out-dir", default="")
    args = parser.parse_args(argv)
    args.idle_wait = 0.0 if args.quick else 10.0  # seconds to wait for a target to go quiet
    if args.no_pin or not shutil.which("taskset") or (os.cpu_count() or 1) < 2:
        args.load_cpu = args.gw_cpu = None
    if args.quick:
        args.duration = min(args.duration, 1.5)
        if args.targets == ",".join(targets.TARGET_NAMES):
            args.targets = "direct,ours"
    return args


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    started = time.monotonic()
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = Path(args.out_dir or RESULTS / f"traffic-{stamp}").resolve()
    run_dir.mkdir(parents=True, exist_ok=True)
    if args.load_cpu:
        os.sched_setaffinity(0, {int(cpu) for cpu in args.load_cpu.split(",")})
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    if args.calibrate:
        counts = tuple(int(n) for n in args.calibrate_conns.split(","))
        plan = [scenarios.calibration(min(args.duration, 10.0), counts)]
        names = ["direct"]
    else:
        plan = [
            scenarios.build(name, args.duration, args.quick)
            for name in args.scenario.split(",")
            if name
        ]
        names = [name for name in args.targets.split(",") if name]
    results, notes = run_matrix(args, plan, names, run_dir, started)
    rows = report.figures(results)
    out: dict[str, Any] = {"args": vars(args), "started_utc": stamp, "notes": notes, "rows": rows}
    out["results"] = results
    out["total_s"] = time.monotonic() - started
    text = [f"# traffic benchmark {stamp} ({out['total_s']:.0f} s)", ""]
    if args.calibrate:
        verdict = report.ceiling(rows, args.ceiling_ms)
        out["ceiling"] = verdict
        CALIBRATION_FILE.write_text(json.dumps(dict(verdict, utc=stamp), indent=1) + "\n")
        text.append(_ceiling_line(verdict, stamp))
    elif CALIBRATION_FILE.is_file():
        saved = json.loads(CALIBRATION_FILE.read_text())
        out["ceiling"] = saved
        text.append(_ceiling_line(saved, saved.get("utc", "?")))
    else:
        text.append("harness ceiling: not calibrated yet (python -m bench.traffic.run --calibrate)")
    text += ["", report.markdown(rows), ""]
    text += [f"- {note}" for note in notes]
    table = "\n".join(text) + "\n"
    (run_dir / "table.md").write_text(table)
    (run_dir / "results.json").write_text(json.dumps(out, indent=1, default=str) + "\n")
    print("\n" + table, flush=True)
    log(f"results in {run_dir}")
    return 0


def _ceiling_line(verdict: dict[str, Any], when: str) -> str:
    rate = verdict.get("chunks_per_s")
    conns = verdict.get("conns")
    if conns is None:
        return f"harness ceiling ({when}): below every calibrated concurrency"
    return (
        f"harness ceiling (calibrated {when}): direct keeps upstream lateness p99 and client"
        f" delay p99 under {verdict['limit_ms']:g} ms up to {conns} concurrent streams,"
        f" {rate:,.0f} chunks/s"
    )


if __name__ == "__main__":
    sys.exit(main())
