"""Load benchmark: the gateway's throughput and added latency against a fake upstream.

    python -m bench.load [--duration S] [--connections 1,16,64] [--quick] [--direct-only] [--full]
        [--workers N] [--store sqlite|redis]

Starts bench.fake_upstream (pinned with the load generator to one CPU) and the gateway (pinned to
another CPU) on free loopback ports, checks that the gateway answers correctly in both modes,
warms up, then for each mode (non-stream, stream) and connection count runs wrk against the
fake upstream directly and through the gateway, alternating which goes first so machine drift
cancels. Prints a table (Markdown) and writes bench/results/load-<UTC>.json and latest.json.
--full: a gateway configured as in production (bench/load_full.py: sqlite store, virtual key
with limits, two provider keys). --workers N: the gateway as N worker processes, not pinned
(they share the machine's CPUs with wrk and the fake upstream); /metrics must then count every
answered request exactly once over all workers. Exit status: 0 all cells passed, 1 a cell
failed (errors or non-2xx), 2 the setup failed.
See docs/benchmarks.md for how to read the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import asdict
from dataclasses import dataclass
from datetime import UTC
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

from bench.fake_upstream import TOKEN
from bench.load_full import OBSERVE_MODES
from bench.load_full import AdminError
from bench.load_full import accounting_report
from bench.load_full import create_key
from bench.load_full import full_config
from bench.load_full import metrics_report
from bench.load_full import observe_config
from bench.load_full import redis_argv
from bench.load_procs import Pinning
from bench.load_procs import Service
from bench.load_procs import free_port
from bench.load_procs import wait_healthy
from bench.load_procs import wait_idle
from bench.load_report import REPO
from bench.load_report import Cell
from bench.load_report import machine_info
from bench.load_report import render_table
from bench.load_report import write_results
from bench.load_wrk import WrkRun
from bench.load_wrk import run_wrk
from bench.load_wrk import wrk_version

MODES = ("non-stream", "stream")
GATEWAY_MODEL = "bench"
UPSTREAM_MODEL = "fake-model"
CHAT_PATH = "/v1/chat/completions"
WARMUP_CONNECTIONS = 16


class SetupError(Exception):
    """The benchmark could not start or the gateway answered wrongly; nothing was measured."""


@dataclass(frozen=True)
class Settings:
    """What one run measures."""

    duration_s: int
    connections: tuple[int, ...]
    warmup_s: int
    chunks: int
    direct_only: bool
    pin: bool
    ready_timeout_s: float
    full: bool = False
    workers: int = 1
    store: str = "sqlite"
    observe: str = "none"


def parse_args(argv: list[str] | None) -> Settings:
    """Command line -> Settings; explicit flags win over --quick."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.load",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--duration", type=int, help="seconds per wrk run (default 5)")
    parser.add_argument("--connections", help="comma-separated counts (default 1,16,64)")
    parser.add_argument("--quick", action="store_true", help="2 s per run, connections 1,16")
    parser.add_argument("--warmup", type=int, help="warm-up seconds per target and mode")
    parser.add_argument("--chunks", type=int, default=20, help="content chunks per stream")
    parser.add_argument(
        "--direct-only", action="store_true", help="only the fake upstream (no gateway)"
    )
    parser.add_argument("--no-pin", action="store_true", help="do not pin processes to CPUs")
    parser.add_argument(
        "--full", action="store_true", help="sqlite store, virtual key, two provider keys"
    )
    parser.add_argument(
        "--store", choices=("sqlite", "redis"), default="sqlite", help="--full's store"
    )
    parser.add_argument(
        "--observe",
        choices=OBSERVE_MODES,
        default="none",
        help="--full: the request log (log-sqlite, log-postgres), tracing, or the response"
        " cache answering every request (cache-hit) or none (cache-miss) on",
    )
    parser.add_argument(
        "--workers", type=int, default=1, help="gateway worker processes (not pinned when > 1)"
    )
    parser.add_argument(
        "--ready-timeout", type=float, default=30.0, help="seconds to wait for the gateway"
    )
    args = parser.parse_args(argv)
    duration = args.duration or (2 if args.quick else 5)
    spec = args.connections or ("1,16" if args.quick else "1,16,64")
    try:
        connections = tuple(int(x) for x in spec.split(",") if x.strip())
    except ValueError:
        parser.error(f"--connections must be integers separated by commas, got {spec!r}")
    if not connections or min(connections) < 1 or duration < 1 or args.chunks < 1:
        parser.error("--connections, --duration and --chunks must be positive")
    if args.workers < 1:
        parser.error("--workers must be positive")
    if args.observe not in ("none", "cache-hit", "cache-miss") and not args.full:
        parser.error("--observe needs --full (except the cache modes)")
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 2)
    return Settings(
        duration_s=duration,
        connections=connections,
        warmup_s=max(0, warmup),
        chunks=args.chunks,
        direct_only=args.direct_only,
        pin=not args.no_pin,
        ready_timeout_s=args.ready_timeout,
        full=args.full,
        workers=args.workers,
        store=args.store,
        observe=args.observe,
    )


def request_body(mode: str, target: str) -> bytes:
    """The request wrk repeats. Direct streams ask for usage, as the gateway does upstream."""
    body: dict[str, object] = {
        "model": GATEWAY_MODEL if target == "gateway" else UPSTREAM_MODEL,
        "messages": [{"role": "user", "content": "hi"}],
        "stream": mode == "stream",
    }
    if mode == "stream" and target == "direct":
        body["stream_options"] = {"include_usage": True}
    return json.dumps(body, separators=(",", ":")).encode()


def gateway_config(port: int, upstream_port: int) -> str:
    """The gateway's config: one OpenAI-kind provider (the fake upstream) and model "bench"."""
    return (
        f"server: {{host: 127.0.0.1, port: {port}}}\n"
        'store: {url: "memory://"}\n'
        "providers:\n"
        "  - {name: up, kind: openai, "
        f'base_url: "http://127.0.0.1:{upstream_port}/v1", keys: [{{key: bench-key}}]}}\n'
        "models:\n"
        f"  - {{name: {GATEWAY_MODEL}, targets: [{{provider: up, model: {UPSTREAM_MODEL}}}]}}\n"
    )


def check_answer(url: str, mode: str, body: bytes, expected: str, bearer: str) -> str | None:
    """Sends one request; returns None if the answer is a correct completion, else why not."""
    request = urllib.request.Request(
        url,
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "Authorization": f"Bearer {bearer}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            status, raw = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, raw = error.code, error.read()
    except OSError as error:
        return f"request failed: {error!r}"
    text = raw.decode("utf-8", "replace")
    if status != 200:
        return f"status {status}: {text[:500]}"
    if mode == "non-stream":
        try:
            content = json.loads(text)["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError):
            return f"not a chat.completion with choices[0].message.content: {text[:500]}"
    else:
        data = [ln[5:].strip() for ln in text.splitlines() if ln.startswith("data:")]
        if not data or data[-1] != "[DONE]":
            return f"stream does not end with 'data: [DONE]': ...{text[-300:]!r}"
        try:
            chunks = [json.loads(d) for d in data[:-1]]
            content = "".join(
                choice["delta"].get("content") or ""
                for chunk in chunks
                for choice in chunk["choices"]
            )
        except (ValueError, KeyError, TypeError):
            return f"stream has a malformed chunk: {text[:500]}"
    if content != expected:
        return f"content {content!r} != expected {expected!r}"
    return None


class LoadBench:
    """Owns the subprocesses of one run and measures with them."""

    def __init__(
        self, settings: Settings, pinning: Pinning, workdir: Path, cpus_allowed: list[int]
    ) -> None:
        self.settings = settings
        self.pinning = pinning
        self.workdir = workdir
        self.services: list[Service] = []
        self.urls: dict[str, str] = {}
        self.startup_s: dict[str, float] = {}
        self.bearer, self.key_id = "bench", ""  # what wrk sends; --full: the virtual key
        # every request the gateway answered that wrk or a check saw, and how many more it may
        # count (those in flight when a wrk run ended: up to its connections per run)
        self.gateway_answered = 0
        self.cpus_allowed = cpus_allowed  # this driver's, before main() pinned it
        self.gateway_cut_off_max = 0
        self.postgres: Any = None  # --observe log-postgres: its server

    def start(self) -> None:
        """Starts the fake upstream and (unless direct-only) the gateway; waits until healthy."""
        up_port = self._start_fake("fake_upstream", "--chunks", str(self.settings.chunks))
        self.urls["direct"] = f"http://127.0.0.1:{up_port}{CHAT_PATH}"
        if self.settings.direct_only:
            return
        gw_port = free_port()
        config = self.workdir / "gateway.yaml"
        store: Path | str = self.workdir / "gateway.db"
        if self.settings.full and self.settings.store == "redis":
            store = self._start_redis()
        observe = self.settings.observe
        if observe == "cache-miss":
            os.environ["BENCH_UNIQUE"] = "1"  # wrk_chat.lua: each request's text another
        postgres = self._start_postgres() if observe == "log-postgres" else None
        # the traces go to a collector of their own, as in production: not the upstream
        collector_port = self._start_collector() if observe == "tracing" else up_port
        full = full_config(gw_port, up_port, store, GATEWAY_MODEL, UPSTREAM_MODEL)
        full += observe_config(observe, self.workdir, collector_port, postgres)
        bare = gateway_config(gw_port, up_port) + observe_config(
            observe, self.workdir, collector_port, None
        )
        config.write_text(full if self.settings.full else bare)
        workers = self.settings.workers
        gateway = self._spawn(
            "gateway",
            [
                *(
                    self.pinning.prefix(self.pinning.gateway_cpu)
                    if workers == 1
                    else self._every_cpu()
                ),
                *(sys.executable, "-m", "gateway", "serve", "--config", str(config)),
                *("--host", "127.0.0.1", "--port", str(gw_port)),
                *(("--workers", str(workers)) if workers > 1 else ()),
            ],
        )
        self._wait(gateway, f"http://127.0.0.1:{gw_port}/healthz", self.settings.ready_timeout_s)
        self.urls["gateway"] = f"http://127.0.0.1:{gw_port}{CHAT_PATH}"
        if self.settings.full:
            try:
                self.key_id, self.bearer = create_key(f"http://127.0.0.1:{gw_port}")
            except AdminError as error:
                raise SetupError(
                    f"{error}\n--- gateway output ---\n{gateway.log_tail()}"
                ) from error
            os.environ["BENCH_KEY"] = self.bearer  # bench/wrk_chat.lua sends it
            log(f"virtual key {self.key_id} created")

    def _every_cpu(self) -> list[str]:
        """--workers N: the gateway may run on every CPU this process was allowed at start
        (this driver pinned itself to the load CPU, and children inherit that)."""
        if self.pinning.load_cpu is None:
            return []
        return ["taskset", "-c", ",".join(str(cpu) for cpu in self.cpus_allowed)]

    def _start_redis(self) -> str:
        """--store redis: a redis-server of the run's own, beside the load generator."""
        port = free_port()
        try:
            argv = redis_argv(port, self.workdir)
        except AdminError as error:
            raise SetupError(str(error)) from error
        redis = self._spawn("redis", [*self.pinning.prefix(self.pinning.load_cpu), *argv])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                return f"redis://127.0.0.1:{port}/0"
            time.sleep(0.05)
        raise SetupError(f"redis-server did not listen on {port}\n{redis.log_tail()}")

    def _start_collector(self) -> int:
        """--observe tracing: an OTLP/HTTP receiver (a second fake upstream: its /v1/traces)
        beside the load generator."""
        return self._start_fake("collector")

    def _start_fake(self, name: str, *args: str) -> int:
        """A bench.fake_upstream on the load generator's CPU, healthy; its port."""
        port = free_port()
        service = self._spawn(
            name,
            [
                *self.pinning.prefix(self.pinning.load_cpu),
                *(sys.executable, "-m", "bench.fake_upstream", "--port", str(port), *args),
            ],
        )
        self._wait(service, f"http://127.0.0.1:{port}/healthz", 15.0)
        return port

    def _start_postgres(self) -> str:
        """--observe log-postgres: a PostgreSQL of the run's own (tests/postgres_server.py),
        stopped with the run's other services."""
        from tests.postgres_server import PostgresServer

        server = PostgresServer(self.workdir / "postgres").start()
        self.postgres = server
        return server.url

    def _spawn(self, name: str, argv: list[str]) -> Service:
        service = Service(name, argv, self.workdir / f"{name}.log", cwd=REPO)
        self.services.append(service)
        return service

    def _wait(self, service: Service, health_url: str, timeout_s: float) -> None:
        problem = wait_healthy(service, health_url, timeout_s)
        if problem is not None:
            raise SetupError(f"{problem}\n--- {service.name} output ---\n{service.log_tail()}")
        self.startup_s[service.name] = round(time.monotonic() - service.started_at, 3)
        log(f"{service.name} up (pid {service.pid}) after {self.startup_s[service.name]:.2f}s")

    def verify(self) -> dict[str, str]:
        """One plain request per target and mode; any wrong answer stops the benchmark."""
        expected = TOKEN * self.settings.chunks
        checked = {}
        for target, url in self.urls.items():
            for mode in MODES:
                body = request_body(mode, target)
                problem = check_answer(url, mode, body, expected, self.bearer)
                if problem is not None:
                    name = "fake_upstream" if target == "direct" else "gateway"
                    service = next(s for s in self.services if s.name == name)
                    raise SetupError(
                        f"{target} {mode}: wrong answer: {problem}\n"
                        f"--- {service.name} output ---\n{service.log_tail()}"
                    )
                checked[f"{target} {mode}"] = "ok"
                self.gateway_answered += target == "gateway"
        log("answers verified: " + ", ".join(checked))
        return checked

    def warm_up(self) -> None:
        """Short unrecorded runs so pools, caches and the JIT-less interpreter settle."""
        if not self.settings.warmup_s:
            return
        conns = min(WARMUP_CONNECTIONS, max(self.settings.connections))
        for mode in MODES:
            for target in self.urls:
                run = self.measure(target, mode, conns, self.settings.warmup_s)
                if not run.ok:
                    log(f"warm-up {mode} {target}: {'; '.join(run.problems)}")
        log("warm-up done")

    def run_cells(self) -> list[Cell]:
        """Every (mode, connections) cell; direct and gateway alternate who goes first."""
        cells: list[Cell] = []
        targets = list(self.urls)
        for mode in MODES:
            for conns in self.settings.connections:
                cell = Cell(mode, conns)
                order = targets if len(cells) % 2 == 0 else targets[::-1]
                for target in order:
                    run = self.measure(target, mode, conns, self.settings.duration_s)
                    setattr(cell, target, run)
                    log(_progress_line(mode, run))
                cells.append(cell)
        return cells

    def measure(self, target: str, mode: str, conns: int, duration_s: int) -> WrkRun:
        if not wait_idle(self.services):
            log("note: processes not idle before the run")
        before = {s.name: s.cpu_seconds() for s in self.services}
        t0 = time.monotonic()
        run = run_wrk(
            target,
            self.urls[target],
            request_body(mode, target),
            conns,
            duration_s,
            self.pinning.prefix(self.pinning.load_cpu),
        )
        elapsed = time.monotonic() - t0
        if target == "gateway":
            self.gateway_answered += run.requests
            # at most one request per connection in flight when wrk stops, and wrk may drop
            # one it read as it shut down (seen: 65 over 4 runs of 16 connections)
            self.gateway_cut_off_max += 2 * conns
        # Share of one core each process used while wrk ran: 100 means CPU-bound.
        run.cpu = {
            s.name: round((s.cpu_seconds() - before[s.name]) / elapsed * 100, 1)
            for s in self.services
        }
        return run

    def accounting(self, cells: list[Cell]) -> dict[str, object] | None:
        """--full: the store settled every request wrk saw answered; /metrics counts them.
        --workers N: /metrics counts each answered request once over all workers."""
        if "gateway" not in self.urls or not (self.settings.full or self.settings.workers > 1):
            return None
        try:
            report = metrics_report(
                self.urls["gateway"], self.gateway_answered, self.gateway_cut_off_max
            )
            if self.settings.full:
                report |= accounting_report(self.urls["gateway"], self.key_id, cells)
        except (AdminError, OSError) as error:
            raise SetupError(f"accounting check: {error}") from error
        log(f"accounting: {report}")
        return report

    def processes(self) -> dict[str, object]:
        """What ran, for the report."""
        return {
            s.name: {
                "argv": s.argv,
                "pid": s.pid,
                "startup_s": self.startup_s.get(s.name),
                "peak_rss_kib": s.peak_rss_kib(),
            }
            for s in self.services
        }

    def stop(self) -> None:
        """Stops every started process by its id, newest first."""
        for service in reversed(self.services):
            service.stop()
        if self.postgres is not None:
            self.postgres.stop()
            self.postgres = None


def describe_pinning(pinning: Pinning, settings: Settings) -> str:
    if settings.workers == 1:
        return pinning.describe()
    return f"{pinning.describe()} (--workers {settings.workers}: the gateway is not pinned)"


def _progress_line(mode: str, run: WrkRun) -> str:
    status = "ok" if run.ok else "FAIL: " + "; ".join(run.problems)
    cpu = " ".join(f"{name} {pct:.0f}%" for name, pct in run.cpu.items())
    return (
        f"{mode:<10} c={run.connections:<3} {run.target:<7} {run.rps:>9,.0f} rps "
        f"p50 {run.p50_ms:.3f} ms p99 {run.p99_ms:.3f} ms cpu[{cpu}] {status}"
    )


def log(message: str) -> None:
    """Progress on stderr, so stdout carries only the table."""
    print(f"[bench.load {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)  # unwinds through the finally that stops the processes


def main(argv: list[str] | None = None) -> int:
    """Runs the benchmark; see the module docstring for the exit status."""
    settings = parse_args(argv)
    wrk = wrk_version()
    if wrk is None:
        print("wrk is not on PATH; run: bash bench/install_deps.sh", file=sys.stderr)
        return 2
    cpus_allowed = sorted(os.sched_getaffinity(0))
    pinning = Pinning.detect(settings.pin)
    if pinning.load_cpu is not None:
        # Keep this driver off the gateway's CPU too.
        os.sched_setaffinity(0, {pinning.load_cpu})
    signal.signal(signal.SIGTERM, _on_sigterm)
    started = datetime.now(UTC)
    log(f"pinning: {describe_pinning(pinning, settings)}")
    with tempfile.TemporaryDirectory(prefix="bench-load-") as tmp:
        bench = LoadBench(settings, pinning, Path(tmp), cpus_allowed)
        try:
            bench.start()
            verification = bench.verify()
            bench.warm_up()
            cells = bench.run_cells()
            accounting = bench.accounting(cells)
            processes = bench.processes()
        except SetupError as error:
            print(f"bench.load: setup failed: {error}", file=sys.stderr)
            return 2
        finally:
            bench.stop()
    ok = all(cell.ok for cell in cells)
    table = render_table(cells)
    report: dict[str, object] = {
        "benchmark": "bench.load",
        "started_at": started.isoformat(timespec="seconds"),
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "ok": ok,
        "machine": machine_info(wrk, cpus_allowed),
        "settings": asdict(settings),
        "pinning": {**asdict(pinning), "description": describe_pinning(pinning, settings)},
        "processes": processes,
        "verification": verification,
        "accounting": accounting,
        "cells": [cell.to_json() for cell in cells],
        "table": table,
    }
    stamped, _ = write_results(report, started)
    print(table)
    print(f"\nresults: {stamped.relative_to(REPO)} (and bench/results/latest.json)")
    if not ok:
        failed = [f"{c.mode} c={c.connections}" for c in cells if not c.ok]
        print(f"FAILED cells: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
