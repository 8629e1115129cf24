"""Long streams through one pinned gateway: CPU per relayed chunk, memory per open stream,
event-loop lag, added inter-chunk delay, and the 1 MB request body.

    python -m bench.micro.long_streams streams --conns 2000 --chunks 20 --interval 0.1
        [--repeat 20] [--upstream openai|anthropic] [--burst 1] [--size 32] [--direct]
        [--ramp 2000] [--window 5] [--py-spy DIR] [--strace 3] [--json FILE]
    python -m bench.micro.long_streams body [--mb 1] [--requests 200] [--direct]

`streams` starts bench/micro/paced_upstream.py (CPU 0) and the gateway in the production
configuration (CPU 1: sqlite store, a virtual key with a budget, a price, two provider keys,
metrics and the JSON access log; docs/performance.md, "Method"), then opens `--conns`
client connections at `--ramp` a second, each a raw asyncio Protocol (this driver, CPU 0)
that streams `POST /v1/chat/completions` (model `ours`: an OpenAI upstream, passed through;
`--upstream anthropic`: model `ours-anthropic`, an Anthropic upstream translated to chat).
Without `--repeat` each connection holds one stream; with it, a connection sends its next
stream when one ends, for `--repeat` seconds (RPS). `--direct` sends the same to the
upstream itself (the baseline). It reports:

- errors (a non-200, an error event, a connection lost before `[DONE]`), streams, RPS;
- added delay per chunk: each content event carries the upstream's CLOCK_MONOTONIC write
  time, so receive - write is what the path adds (p50/p99/max), and the gap between reads;
- the gateway's CPU over a steady window (every stream open, none starting: `--window` s,
  after the ramp) divided by the chunks received in it (us per chunk), and over the run;
- RSS of the gateway's tree at idle, at the steady window and at its peak (VmHWM), and
  (peak - idle) / streams;
- /healthz latency probed at 20 Hz on its own keep-alive connection (event-loop lag);
- read and write system calls per chunk (/proc/PID/io over the window), and with
  `--strace S` an `strace -c -f` of the gateway for S seconds after the window;
- with `--py-spy DIR`, a py-spy raw profile of the window (read it with profile_report).

`body` sends `--requests` sequential streaming requests with a `--mb` MB user message at one
connection and reports the latency to the last byte (with `--direct` too: the added part).
The allocation side of the 1 MB body is tests/server/test_large_body.py's (tracemalloc in
process).

Soft RLIMIT_NOFILE is raised to the hard limit; everything listens on loopback; every
process started is stopped by its id; each phase has a deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import uvloop

from bench.load_procs import Service
from bench.load_procs import free_port
from bench.load_procs import process_cpu_seconds
from bench.load_procs import wait_healthy
from bench.load_report import REPO
from bench.micro.long_streams_client import Probe
from bench.micro.long_streams_client import Run
from bench.micro.long_streams_client import open_streams
from bench.micro.long_streams_client import percentile

KEY = "sk-gw-bench-0123456789abcdef"


def config(port: int, upstream: int, directory: Path, max_streams: int) -> str:
    base = f"http://127.0.0.1:{upstream}"
    keys = "[{key: key-a}, {key: key-b}]"
    return (
        f"server: {{host: 127.0.0.1, port: {port},"
        f" limits: {{max_concurrent_streams: {max_streams}}}}}\n"
        "auth: {master_key: bench-master}\n"
        f'store: {{url: "sqlite:///{directory}/gw.db"}}\n'
        "logging: {level: info, format: json, access_log: true}\n"
        "keys:\n"
        f"  - {{name: bench, key: {KEY}, budget_usd: 1000000, rpm: 100000000, tpm: 100000000000}}\n"
        "providers:\n"
        f'  - {{name: up, kind: openai, base_url: "{base}/v1", keys: {keys}}}\n'
        f'  - {{name: an, kind: anthropic, base_url: "{base}", keys: {keys}}}\n'
        "models:\n"
        "  - {name: ours, targets: [{provider: up, model: mock-model}],"
        " price: {input_per_mtok: 1.0, output_per_mtok: 2.0}}\n"
        "  - {name: ours-anthropic, targets: [{provider: an, model: claude-mock}],"
        " price: {input_per_mtok: 1.0, output_per_mtok: 2.0}}\n"
    )


def _pin(cpu: int) -> list[str]:
    return ["taskset", "-c", str(cpu)] if len(os.sched_getaffinity(0)) >= 2 else []


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def user_system_s(pid: int) -> tuple[float, float]:
    """The process's user and system CPU seconds (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def io_calls(pid: int) -> tuple[int, int]:
    fields = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    return int(fields["syscr"]), int(fields["syscw"])


class Rig:
    """The paced upstream and (unless direct) the gateway, started and stopped by id."""

    def __init__(self, args: argparse.Namespace, work: Path) -> None:
        self.args, self.work = args, work
        self.services: list[Service] = []
        self.gateway: Service | None = None

    def start(self) -> tuple[int, str]:
        args, work = self.args, self.work
        up_port = free_port()
        upstream_argv = [
            *_pin(0),
            sys.executable,
            "-m",
            "bench.micro.paced_upstream",
            f"--port={up_port}",
            f"--chunks={args.chunks}",
            f"--interval={args.interval}",
            f"--size={args.size}",
            f"--burst={args.burst}",
        ]
        upstream = Service("upstream", upstream_argv, work / "upstream.log", REPO)
        self.services.append(upstream)
        self._wait(upstream, f"http://127.0.0.1:{up_port}/healthz")
        if args.direct:
            path = "/v1/messages" if args.upstream == "anthropic" else "/v1/chat/completions"
            return up_port, path
        port = free_port()
        (work / "gw.yaml").write_text(config(port, up_port, work, args.max_streams))
        # LONG_STREAMS_GATEWAY: another entry point for the gateway (an experiment's wrapper)
        entry = os.environ.get("LONG_STREAMS_GATEWAY")
        start = [entry] if entry else ["-m", "gateway"]
        gw_argv = [*_pin(1), sys.executable, *start, "serve", "--config", "gw.yaml"]
        self.gateway = Service("gateway", gw_argv, work / "gateway.log", work)
        self.services.append(self.gateway)
        self._wait(self.gateway, f"http://127.0.0.1:{port}/healthz")
        return port, "/v1/chat/completions"

    def _wait(self, service: Service, url: str) -> None:
        error = wait_healthy(service, url, 30.0)
        if error is not None:
            self.stop()
            raise SystemExit(f"{service.name} did not start: {error}\n{service.log_tail()}")

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop(grace_s=5.0)


def request_bytes(args: argparse.Namespace, port: int, path: str, content: str) -> bytes:
    model = "ours-anthropic" if args.upstream == "anthropic" else "ours"
    body: dict[str, object] = {
        "model": model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 1024,
        "messages": [{"role": "user", "content": content}],
    }
    raw = json.dumps(body, separators=(",", ":")).encode()
    return (
        b"POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
        b"x-api-key: %s\r\nanthropic-version: 2023-06-01\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (path.encode(), port, KEY.encode(), KEY.encode(), len(raw), raw)
    )


async def run_streams(
    args: argparse.Namespace, rig: Rig, port: int, path: str
) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    pid = rig.gateway.pid if rig.gateway is not None else rig.services[0].pid
    request = request_bytes(args, port, path, "Say something long.")
    warm = Run(request, args.chunks, repeat_until=0.0)
    await open_streams(loop, port, warm, 50, 10_000)
    await asyncio.wait_for(warm.all_done, 60)
    await asyncio.sleep(1.0)
    idle_kib = rss_kib(pid)
    probe = Probe(loop, port)
    await probe.start()
    cpu0, t0 = process_cpu_seconds(pid), time.monotonic()
    stream_s = args.chunks * args.interval
    until = time.monotonic() + args.repeat if args.repeat else 0.0
    run = Run(request, args.chunks, repeat_until=until)
    await open_streams(loop, port, run, args.conns, args.ramp)
    ramp_s = time.monotonic() - t0
    window: dict[str, float] = {}
    samples: list[int] = []
    # steady: every stream open and past its first chunk, none ending (held) or the middle
    # of the repeat period
    settle = args.settle if args.settle >= 0 else (1.0 if args.repeat else min(2.0, stream_s / 4))
    await asyncio.sleep(settle)
    if not run.all_done.done():
        c1, n1, (r1, w1), w_t0 = (
            process_cpu_seconds(pid),
            run.chunks,
            io_calls(pid),
            time.monotonic(),
        )
        u1, s1 = user_system_s(pid)
        up1, me1 = process_cpu_seconds(rig.services[0].pid), time.process_time()
        spy = _py_spy(args, pid)
        end_at = w_t0 + args.window
        while time.monotonic() < end_at and not run.all_done.done():
            samples.append(rss_kib(pid))
            await asyncio.sleep(0.25)
        c2, n2, (r2, w2) = process_cpu_seconds(pid), run.chunks, io_calls(pid)
        u2, s2 = user_system_s(pid)
        up2, me2 = process_cpu_seconds(rig.services[0].pid), time.process_time()
        w_t1 = time.monotonic()
        dt = w_t1 - w_t0
        window_lag = probe.between(w_t0, w_t1)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            await loop.run_in_executor(None, spy.wait)
        chunks = max(n2 - n1, 1)
        window = {
            "seconds": round(dt, 2),
            "chunks": n2 - n1,
            "chunks_per_s": round((n2 - n1) / dt),
            "cpu_s": round(c2 - c1, 3),
            "cpu_us_per_chunk": round((c2 - c1) * 1e6 / chunks, 2),
            "cpu_share": round((c2 - c1) / dt, 3),
            "user_us_per_chunk": round((u2 - u1) * 1e6 / chunks, 2),
            "system_us_per_chunk": round((s2 - s1) * 1e6 / chunks, 2),
            "read_syscalls_per_chunk": round((r2 - r1) / chunks, 3),
            "write_syscalls_per_chunk": round((w2 - w1) / chunks, 3),
            "lag_ms": {q: round(percentile(window_lag, p), 2) for q, p in _QS},
            # CPU 0's two processes: near 1.0 together, the load side is the bottleneck
            "upstream_cpu_share": round((up2 - up1) / dt, 3),
            "client_cpu_share": round((me2 - me1) / dt, 3),
        }
        if args.strace and not run.all_done.done():
            window["strace"] = await _strace(pid, args.strace)
    while not run.all_done.done():
        samples.append(rss_kib(pid))
        try:
            await asyncio.wait_for(asyncio.shield(run.all_done), 0.25)
        except TimeoutError:
            if time.monotonic() - t0 > args.repeat + stream_s * 3 + ramp_s + 60:
                break
    elapsed = time.monotonic() - t0
    cpu_run = process_cpu_seconds(pid) - cpu0
    await probe.stop()
    lag = sorted(probe.latencies_ms)
    delays = sorted(run.delays_ns)
    gaps = sorted(run.gaps_ns)
    steady_kib = max(samples) if samples else rss_kib(pid)
    return {
        "mode": "direct" if args.direct else "gateway",
        "upstream": args.upstream,
        "conns": args.conns,
        "chunks": args.chunks,
        "interval_s": args.interval,
        "burst": args.burst,
        "streams_ok": run.ok,
        "errors": run.errors,
        "error_kinds": dict(run.error_kinds),
        "unfinished": run.open,
        "rps": round(run.ok / elapsed, 1),
        "ramp_s": round(ramp_s, 2),
        "chunks_received": run.chunks,
        "delay_ms": {q: round(percentile(delays, p) / 1e6, 2) for q, p in _QS},
        "gap_ms": {q: round(percentile(gaps, p) / 1e6, 2) for q, p in _QS},
        "lag_ms": {q: round(percentile(lag, p), 2) for q, p in _QS} | {"probes": len(lag)},
        "window": window,
        "run_cpu_us_per_chunk": round(cpu_run * 1e6 / max(run.chunks, 1), 2),
        "run_cpu_us_per_stream": round(cpu_run * 1e6 / max(run.ok + run.errors, 1), 1),
        "rss_mib": {
            "idle": round(idle_kib / 1024, 1),
            "steady": round(steady_kib / 1024, 1),
            "peak_hwm": round(rss_kib(pid, "VmHWM") / 1024, 1),
            "per_stream_kib": round((steady_kib - idle_kib) / max(args.conns, 1), 2),
        },
    }


_QS = (("p50", 50.0), ("p99", 99.0), ("max", 100.0))


def _py_spy(args: argparse.Namespace, pid: int) -> subprocess.Popen[bytes] | None:
    if not args.py_spy:
        return None
    out = Path(args.py_spy)
    out.mkdir(parents=True, exist_ok=True)
    spy = str(Path(sys.executable).parent / "py-spy")
    argv = [spy, "record", "-r", "200", "--nonblocking", "-p", str(pid), "-f", "raw"]
    argv += ["-o", str(out / f"{args.upstream}-{args.conns}.txt")]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _strace(pid: int, seconds: float) -> str:
    proc = await asyncio.create_subprocess_exec(
        "strace", "-c", "-f", "-p", str(pid), stderr=asyncio.subprocess.PIPE
    )
    await asyncio.sleep(seconds)
    proc.send_signal(signal.SIGINT)
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    return err.decode(errors="replace")


async def run_body(args: argparse.Namespace, port: int, path: str) -> dict[str, object]:
    loop = asyncio.get_running_loop()
    content = "lorem ipsum " * int(args.mb * 1e6 / 12)
    request = request_bytes(args, port, path, content)
    run = Run(request, args.chunks, repeat_until=float("inf"), max_streams=args.requests + 10)
    await open_streams(loop, port, run, 1, 10_000)
    await asyncio.wait_for(run.all_done, 30 + args.requests)
    if run.errors:
        return {"errors": run.errors, "error_kinds": dict(run.error_kinds)}
    latencies = run.latencies_ms[10:]  # after a warm-up
    latencies.sort()
    return {
        "mode": "direct" if args.direct else "gateway",
        "body_bytes": len(request),
        "requests": len(latencies),
        "latency_ms": {q: round(percentile(latencies, p), 3) for q, p in _QS},
    }


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.micro.long_streams")
    parser.add_argument("what", choices=("streams", "body"))
    parser.add_argument("--conns", type=int, default=2000)
    parser.add_argument("--chunks", type=int, default=20)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--size", type=int, default=32)
    parser.add_argument("--burst", type=int, default=1)
    parser.add_argument("--repeat", type=float, default=0.0, help="seconds of back-to-back streams")
    parser.add_argument("--upstream", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--direct", action="store_true")
    parser.add_argument("--ramp", type=float, default=2000.0, help="connections opened a second")
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--settle", type=float, default=-1.0, help="seconds after the ramp")
    parser.add_argument("--max-streams", type=int, default=9950)
    parser.add_argument("--py-spy", default="")
    parser.add_argument("--strace", type=float, default=0.0)
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--json", default="")
    args = parser.parse_args(argv)
    if args.what == "body":
        args.chunks, args.interval = 1, 0.0
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # the client: CPU 0
    with tempfile.TemporaryDirectory(prefix="long-streams-") as tmp:
        rig = Rig(args, Path(tmp))
        try:
            port, path = rig.start()
            if args.what == "streams":
                report = uvloop.run(run_streams(args, rig, port, path))
            else:
                report = uvloop.run(run_body(args, port, path))
        finally:
            rig.stop()
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 1 if report.get("errors") else 0


if __name__ == "__main__":
    raise SystemExit(main())
