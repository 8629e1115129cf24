"""Runs wrk once with bench/wrk_chat.lua and turns its JSON line into a WrkRun."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

LUA_SCRIPT = Path(__file__).with_name("wrk_chat.lua")
RESULT_PREFIX = "BENCH_WRK_JSON "
# A request slower than this counts as a timeout error (and fails the cell).
REQUEST_TIMEOUT_S = 10


@dataclass
class WrkRun:
    """One wrk run against one URL. Latencies in milliseconds, request to last byte."""

    target: str
    url: str
    connections: int
    duration_s: int
    requests: int = 0
    rps: float = 0.0
    p50_ms: float = 0.0
    p90_ms: float = 0.0
    p99_ms: float = 0.0
    p999_ms: float = 0.0
    max_ms: float = 0.0
    non_2xx: int = 0
    socket_errors: int = 0
    cpu: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """A run counts only if it made requests and every one got a 2xx answer."""
        return not self.problems

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict, with ok spelled out."""
        data = asdict(self)
        data["ok"] = self.ok
        return data


def wrk_version() -> str | None:
    """wrk's version line, or None if wrk is not installed."""
    if shutil.which("wrk") is None:
        return None
    # wrk -v prints its banner and usage, then exits with status 1.
    result = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10, check=False)
    lines = (result.stdout + result.stderr).strip().splitlines()
    return lines[0] if lines else "unknown"


def run_wrk(
    target: str,
    url: str,
    body: bytes,
    connections: int,
    duration_s: int,
    pin_prefix: list[str],
) -> WrkRun:
    """One bounded wrk run (-t1); problems are recorded on the result, never raised."""
    run = WrkRun(target, url, connections, duration_s)
    argv = [
        *pin_prefix,
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{duration_s}s",
        f"--timeout={REQUEST_TIMEOUT_S}s",
        "--latency",
        "-s",
        str(LUA_SCRIPT),
        url,
    ]
    env = dict(os.environ, BENCH_BODY=body.decode())
    if env.get("BENCH_UNIQUE"):  # every request of every run another: a prefix per run
        env["BENCH_UNIQUE"] = uuid.uuid4().hex
    try:
        result = subprocess.run(
            argv,
            env=env,
            capture_output=True,
            text=True,
            timeout=duration_s + REQUEST_TIMEOUT_S + 20,
            check=False,
        )
    except subprocess.TimeoutExpired:
        run.problems.append("wrk did not finish in time")
        return run
    line = next((x for x in result.stdout.splitlines() if x.startswith(RESULT_PREFIX)), None)
    if result.returncode != 0 or line is None:
        tail = (result.stdout + result.stderr).strip()[-500:]
        run.problems.append(f"wrk failed (exit {result.returncode}): {tail}")
        return run
    _fill(run, json.loads(line[len(RESULT_PREFIX) :]))
    return run


def _fill(run: WrkRun, data: dict[str, object]) -> None:
    requests = _int(data["requests"])
    duration_us = _int(data["duration_us"])
    errors = _dict(data["errors"])
    latency = _dict(data["latency_us"])
    run.requests = requests
    run.rps = requests / (duration_us / 1e6) if duration_us else 0.0
    run.p50_ms = _int(latency["p50"]) / 1000
    run.p90_ms = _int(latency["p90"]) / 1000
    run.p99_ms = _int(latency["p99"]) / 1000
    run.p999_ms = _int(latency["p99.9"]) / 1000
    run.max_ms = _int(latency["max"]) / 1000
    run.non_2xx = _int(errors["status"])
    run.socket_errors = sum(_int(errors[k]) for k in ("connect", "read", "write", "timeout"))
    if requests == 0:
        run.problems.append("no request completed")
    if run.non_2xx:
        run.problems.append(f"{run.non_2xx} responses with status >= 400")
    if run.socket_errors:
        detail = ", ".join(f"{k} {errors[k]}" for k in ("connect", "read", "write", "timeout"))
        run.problems.append(f"{run.socket_errors} socket errors ({detail})")


def _int(value: object) -> int:
    if not isinstance(value, int | float):
        raise TypeError(f"expected a number from wrk, got {value!r}")
    return int(value)


def _dict(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object from wrk, got {value!r}")
    return value
