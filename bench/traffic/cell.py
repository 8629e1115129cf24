"""One measured cell: the load generator against one target, with everything sampled around it.

While bench.traffic.client runs (pinned to the load CPU), a thread samples the target's process
tree every 0.25 s for RSS (summed over the tree) and the probe process (bench.traffic.probe,
pinned to the target's CPU) times a cheap route. CPU ticks of the tree (/proc/<pid>/stat utime +
stime) are read before and after; the upstream's lateness is read (and reset) from every upstream
process's stats port after. The result is a plain dict of counts and histogram dicts that
report.py turns into figures.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from bench.peers.compare import CLK
from bench.traffic.hist import Histogram
from bench.traffic.hist import merged
from bench.traffic.scenarios import Cell
from bench.traffic.targets import Target

SAMPLE_PERIOD_S = 0.25
CLIENT_SLACK_S = 60.0  # on top of a cell's duration and drain: the client's hard timeout


def upstream_stats(stats_ports: list[int]) -> dict[str, Any]:
    """Every upstream process's lateness merged, and the chunks they sent; resets them."""
    hists, sent, streams = [], 0, 0
    for port in stats_ports:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            connection.request("GET", "/stats")
            body = json.loads(connection.getresponse().read())
        except (OSError, ValueError):
            continue
        finally:
            connection.close()
        hists.append(Histogram.from_dict(body["lateness"]))
        sent += body["chunks_sent"]
        streams += body["streams"]
    return {"lateness": merged(hists).to_dict(), "chunks_sent": sent, "streams": streams}


class PeakSampler(threading.Thread):
    def __init__(self, target: Target) -> None:
        super().__init__(daemon=True)
        self.target = target
        self.peak_kb = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        while not self.stopping.is_set():
            self.peak_kb = max(self.peak_kb, self.target.rss_kb())
            self.stopping.wait(SAMPLE_PERIOD_S)


def cpu_busy_s() -> dict[str, float]:
    """Busy seconds of every CPU so far (/proc/stat: all but idle and iowait)."""
    busy = {}
    with open("/proc/stat") as stat:
        for line in stat:
            name, *fields = line.split()
            if name.startswith("cpu") and name != "cpu":
                ticks = [int(value) for value in fields[:8]]
                busy[name[3:]] = (sum(ticks) - ticks[3] - ticks[4]) / CLK
    return busy


def _pinned(cpu: str | None, argv: list[str]) -> list[str]:
    return ["taskset", "-c", cpu, *argv] if cpu else argv


def client_argv(target: Target, cell: Cell, procs: int, ramp_per_s: float) -> list[str]:
    argv = [sys.executable, "-m", "bench.traffic.client", "--port", str(target.port)]
    argv += ["--model", target.model, "--prompt-bytes", str(cell.prompt_bytes)]
    argv += ["--conns", str(cell.conns), "--procs", str(procs)]
    argv += ["--duration", str(cell.duration_s), "--drain", str(cell.drain_s)]
    argv += ["--expect-chunks", str(cell.expect_chunks), "--ramp-per-s", str(ramp_per_s)]
    for header in target.headers:
        argv += ["--header", header]
    if not cell.stream:
        argv.append("--no-stream")
    if cell.tools:
        argv.append("--tools")
    if cell.one_shot:
        argv.append("--one-shot")
    return argv


def run_cell(
    target: Target,
    cell: Cell,
    stats_ports: list[int],
    load_cpu: str | None,
    probe_cpu: str | None,
    client_procs: int,
    ramp_per_s: float,
) -> dict[str, Any]:
    upstream_stats(stats_ports)  # resets the counters: what follows is this cell's
    bound_s = cell.duration_s + cell.drain_s + CLIENT_SLACK_S
    probe = None
    if target.probe_path is not None:
        probe_argv = [sys.executable, "-m", "bench.traffic.probe", "--port", str(target.port)]
        probe_argv += ["--path", target.probe_path, "--max-s", str(bound_s)]
        probe = subprocess.Popen(
            _pinned(probe_cpu, probe_argv),
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    sampler = PeakSampler(target)
    sampler.start()
    ticks_before = target.cpu_ticks()
    busy_before = cpu_busy_s()
    started = time.monotonic()
    argv = _pinned(load_cpu, client_argv(target, cell, client_procs, ramp_per_s))
    # its own session: the client forks its processes, and all of them stop with the group
    client = subprocess.Popen(
        argv,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        output, errors = client.communicate(timeout=bound_s)
        client_error = errors[-2000:]
    except subprocess.TimeoutExpired:
        output, client_error = "", f"client timed out after {bound_s:.0f}s"
        _stop_group(client)
    except BaseException:
        _stop_group(client)  # Ctrl-C or SIGTERM of the run: no load left behind
        if probe is not None:
            _stop_group(probe)
        raise
    elapsed = time.monotonic() - started
    ticks_after = target.cpu_ticks()
    busy_after = cpu_busy_s()
    sampler.stopping.set()
    sampler.join()
    result: dict[str, Any] = {"target": target.name, "scenario": cell.scenario, "cell": cell.label}
    result.update(conns=cell.conns, duration_s=cell.duration_s, elapsed_s=elapsed)
    result["one_shot"] = cell.one_shot
    # how busy each CPU was, whoever used it: other work on the machine shows up here
    result["cpu_busy_s"] = {cpu: busy_after[cpu] - busy_before.get(cpu, 0.0) for cpu in busy_after}
    result.update(cpu_s=(ticks_after - ticks_before) / CLK, peak_rss_kb=sampler.peak_kb)
    result["idle_rss_kb"] = target.idle_rss_kb
    procs = None
    for line in output.splitlines():
        if line.startswith("TRAFFIC_JSON "):
            procs = json.loads(line[len("TRAFFIC_JSON ") :])["procs"]
    result["client"] = procs
    if procs is None:
        result["client_error"] = client_error or "no TRAFFIC_JSON line"
    if probe is not None:
        result["probe"] = _stop_probe(probe)
    result["upstream"] = upstream_stats(stats_ports)
    return result


def _stop_group(process: subprocess.Popen[str]) -> None:
    """Stops a process this module started in its own session, and what it forked."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate()


def _stop_probe(probe: subprocess.Popen[str]) -> dict[str, Any] | None:
    if probe.poll() is None:
        os.kill(probe.pid, signal.SIGTERM)  # the probe this cell started, by its id
    try:
        output, _ = probe.communicate(timeout=15)
    except subprocess.TimeoutExpired:
        probe.kill()
        probe.communicate()
        return None
    for line in output.splitlines():
        if line.startswith("PROBE_JSON "):
            return json.loads(line[len("PROBE_JSON ") :])
    return None
