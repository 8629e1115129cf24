"""Profile the gateway's hot path under a bounded wrk load (the bench.load setup).

    python -m bench.micro.profile_gateway --mode non-stream|stream [--profiler py-spy|cprofile]
        [--connections 16] [--duration 10] [--out DIR] [--native] [--full [--observe MODE]]

Starts bench.fake_upstream and the gateway exactly as bench.load does (OpenAI-kind provider
pointing at the fake upstream, the two pinned to different CPUs when there are two), checks
one answer (--full: bench.load --full's sqlite store, master key, two provider keys and a
virtual key made through the admin API, which wrk then sends), warms up, then drives
`wrk` for `--duration` seconds while the gateway is profiled:
- py-spy: `py-spy record --pid <gateway> --format raw` (collapsed stacks with line numbers)
  for the length of the wrk run; read it with `python -m bench.micro.profile_report`.
- perf: `perf record -F RATE -g -p <gateway>` (kernel + C frames: syscalls, GC, msgspec,
  uvloop, aiohttp's C parsers; Python frames show as the interpreter) into
  DIR/<mode>.perf.data; read it with `perf report -i ... --no-children --sort dso,sym`.
- cprofile: the gateway runs as `python -m cProfile -o DIR/<mode>.prof -m gateway serve ...`
  without a warm-up; after wrk it is stopped with SIGTERM to its process id, so it drains
  and exits normally and the profile is written.
It prints the wrk result, the gateway's CPU use and its CPU microseconds per request, and the
p50/p99 of gateway_overhead_seconds read from /metrics (interpolated in its buckets), and
writes them to DIR/<mode>.json. Every process it starts is stopped by its id.
py-spy is not a project dependency: `pip install py-spy` into the venv to use it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.load import GATEWAY_MODEL
from bench.load import UPSTREAM_MODEL
from bench.load import check_answer
from bench.load import gateway_config
from bench.load import request_body
from bench.load_full import create_key
from bench.load_full import full_config
from bench.load_full import observe_config
from bench.load_procs import Pinning
from bench.load_procs import Service
from bench.load_procs import free_port
from bench.load_procs import wait_healthy
from bench.load_report import REPO
from bench.load_wrk import run_wrk

CHUNKS = 20  # content chunks per stream, bench.load's default


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.micro.profile_gateway")
    parser.add_argument("--mode", choices=("non-stream", "stream"), required=True)
    parser.add_argument(
        "--profiler", choices=("py-spy", "cprofile", "perf", "none"), default="py-spy"
    )
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--native", action="store_true", help="py-spy --native (C frames)")
    parser.add_argument(
        "--blocking",
        action="store_true",
        help="let py-spy stop the process per sample (default: --nonblocking; stopping it "
        "inflates samples at syscall sites, e.g. asyncio.get_running_loop's getpid)",
    )
    parser.add_argument(
        "--full", action="store_true", help="bench.load --full's config (sqlite, virtual key)"
    )
    parser.add_argument(
        "--observe",
        choices=("none", "log-sqlite", "tracing", "cache-hit"),
        default="none",
        help="with --full: the request log, tracing or the cache on, as bench.load --observe",
    )
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "gw-profile")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    py_spy = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if args.profiler == "py-spy" and py_spy is None:
        print("py-spy not found: pip install py-spy", file=sys.stderr)
        return 2
    pinning = Pinning.detect(True)
    services: list[Service] = []
    workdir = Path(tempfile.mkdtemp(prefix="gw-profile-"))
    try:
        up_port = free_port()
        upstream = Service(
            "fake_upstream",
            [
                *pinning.prefix(pinning.load_cpu),
                *(sys.executable, "-m", "bench.fake_upstream"),
                *("--port", str(up_port), "--chunks", str(CHUNKS)),
            ],
            workdir / "fake_upstream.log",
            cwd=REPO,
        )
        services.append(upstream)
        _healthy(upstream, f"http://127.0.0.1:{up_port}/healthz")
        gw_port = free_port()
        config = workdir / "gateway.yaml"
        store = workdir / "gateway.db"
        full = full_config(gw_port, up_port, store, GATEWAY_MODEL, UPSTREAM_MODEL)
        if args.full:
            full += observe_config(args.observe, workdir, up_port, None)
        config.write_text(full if args.full else gateway_config(gw_port, up_port))
        prof = args.out / f"{args.mode}.prof"
        python = [sys.executable]
        if args.profiler == "cprofile":
            python += ["-m", "cProfile", "-o", str(prof)]
        gateway = Service(
            "gateway",
            [
                *pinning.prefix(pinning.gateway_cpu),
                *python,
                *("-m", "gateway", "serve", "--config", str(config)),
                *("--host", "127.0.0.1", "--port", str(gw_port)),
            ],
            workdir / "gateway.log",
            cwd=REPO,
        )
        services.append(gateway)
        _healthy(gateway, f"http://127.0.0.1:{gw_port}/healthz")
        url = f"http://127.0.0.1:{gw_port}/v1/chat/completions"
        body = request_body(args.mode, "gateway")
        bearer = "bench"
        if args.full:
            _, bearer = create_key(f"http://127.0.0.1:{gw_port}")
            os.environ["BENCH_KEY"] = bearer  # bench/wrk_chat.lua sends it
        problem = check_answer(url, args.mode, body, "tok " * CHUNKS, bearer)
        if problem is not None:
            print(f"wrong answer: {problem}\n{gateway.log_tail()}", file=sys.stderr)
            return 2
        load_prefix = pinning.prefix(pinning.load_cpu)
        if args.warmup and args.profiler != "cprofile":
            run_wrk("gateway", url, body, args.connections, args.warmup, load_prefix)
        spy = None
        if args.profiler == "py-spy":
            assert py_spy is not None
            spy_argv = [
                py_spy,
                "record",
                *("--pid", str(gateway.pid)),
                *("--duration", str(args.duration)),
                *("--rate", str(args.rate)),
                *("--format", "raw", "-o", str(args.out / f"{args.mode}.txt")),
            ]
            if args.native:
                spy_argv.append("--native")
            elif not args.blocking:
                spy_argv.append("--nonblocking")
            spy = subprocess.Popen(spy_argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(0.5)  # let py-spy attach before the load starts
        elif args.profiler == "perf":
            perf_argv = [
                "perf",
                "record",
                *("-F", str(args.rate), "-g", "-p", str(gateway.pid)),
                *("-o", str(args.out / f"{args.mode}.perf.data"), "--", "sleep"),
                str(args.duration),
            ]
            spy = subprocess.Popen(perf_argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            time.sleep(0.2)
        cpu_before = gateway.cpu_seconds()
        started = time.monotonic()
        run = run_wrk("gateway", url, body, args.connections, args.duration, load_prefix)
        elapsed = time.monotonic() - started
        cpu = gateway.cpu_seconds() - cpu_before
        overhead = overhead_quantiles(f"http://127.0.0.1:{gw_port}/metrics")
        if spy is not None:
            _, err = spy.communicate(timeout=args.duration + 60)
            if spy.returncode != 0:
                print(f"{args.profiler} failed: {err.decode(errors='replace')}", file=sys.stderr)
        result = {
            "mode": args.mode,
            "profiler": args.profiler,
            "connections": args.connections,
            "duration_s": args.duration,
            "requests": run.requests,
            "rps": round(run.rps, 1),
            "p50_ms": run.p50_ms,
            "p99_ms": run.p99_ms,
            "problems": run.problems,
            "gateway_cpu_pct": round(cpu / elapsed * 100, 1),
            "gateway_cpu_us_per_request": round(cpu / run.requests * 1e6, 1)
            if run.requests
            else None,
            # gateway_overhead_seconds over every request served (checks and warm-up too)
            "overhead_us": overhead,
        }
        print(json.dumps(result, indent=2))
        (args.out / f"{args.mode}.json").write_text(json.dumps(result, indent=2) + "\n")
        return 0 if run.ok else 1
    finally:
        for service in reversed(services):
            service.stop(grace_s=30.0)
        if args.profiler == "cprofile" and (args.out / f"{args.mode}.prof").exists():
            print(f"profile: {args.out / f'{args.mode}.prof'}", file=sys.stderr)


def overhead_quantiles(metrics_url: str) -> dict[str, float | None]:
    """p50 and p99 of gateway_overhead_seconds (all series summed), interpolated linearly
    within the histogram's buckets, in microseconds; and the share at or under 100 us."""
    with urllib.request.urlopen(metrics_url, timeout=10) as response:
        text = response.read().decode()
    counts: dict[float, float] = {}
    for line in text.splitlines():
        if line.startswith("gateway_overhead_seconds_bucket{"):
            labels, value = line.rsplit(" ", 1)
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            le = float("inf") if bound == "+Inf" else float(bound)
            counts[le] = counts.get(le, 0.0) + float(value)
    bounds = sorted(counts)
    total = counts.get(float("inf"), 0.0)
    if not total:
        return {"p50": None, "p99": None, "share_le_100us": None}

    def quantile(q: float) -> float | None:
        lower, below = 0.0, 0.0
        for le in bounds:
            if counts[le] >= q * total:
                if le == float("inf"):
                    return None  # beyond the last bucket
                inside = counts[le] - below
                return (lower + (le - lower) * (q * total - below) / inside) * 1e6
            lower, below = le, counts[le]
        return None

    return {
        "p50": quantile(0.5),
        "p99": quantile(0.99),
        "share_le_100us": round(counts.get(1e-4, 0.0) / total, 3),
    }


def _healthy(service: Service, url: str) -> None:
    problem = wait_healthy(service, url, 30.0)
    if problem is not None:
        raise SystemExit(f"{problem}\n{service.log_tail()}")


if __name__ == "__main__":
    sys.exit(main())
