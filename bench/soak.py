"""Soak: a bounded mixed load against one gateway process, its memory and file descriptors
sampled throughout.

    python -m bench.soak            (make soak; SOAK_SECONDS=90 for a short run)

The gateway (sqlite store, a master key, a static and a created virtual key with a budget)
sits in front of two fake upstreams: tests/upstreams/openai_upstream.py (text and parallel
tool calls) and tests/upstreams/faulty_upstream.py (OpenAI and Anthropic kinds), which now
and then answers with a fault (FAULT_P of all requests: a 500, a reset before or after the
headers, a truncated or malformed stream, an overloaded event) that the gateway
fails over or reports. CONCURRENCY clients send streaming and non-streaming requests, with
and without tools, with the three keys, each at most one per CLIENT_INTERVAL_S (a steady
load, not a saturating one: the point is the memory after many requests, not throughput).

Every SAMPLE_S the gateway's RSS (VmRSS) and open fd count are written to `samples.csv` in
the output directory (`SOAK_OUT`, else a fresh temp dir). After the warm-up (a quarter of the
run, at most WARMUP_MAX_S), a least-squares line is fitted to RSS over time: its slope, in
KiB per minute, is what the run reports, with the fd range after the warm-up. The summary is
printed and written to `summary.json`. Exit status 1 when a request hung or an answer was
neither a success nor a proper error.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import aiohttp

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.faulty_upstream import TOOLS
from tests.upstreams.faulty_upstream import FaultyUpstream
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = "sk-soak-master"
STATIC = "sk-soak-static"
CONCURRENCY = 8
CLIENT_INTERVAL_S = 0.08  # each client starts at most one request per interval: ~100/s in all
SAMPLE_S = 2.0
WARMUP_MAX_S = 120.0
FAULT_P = 0.1  # of all requests
FLAKY_SHARE = 0.4  # of the requests go to the model in front of the faulty upstream
FAULTS = ("fail-500", "reset-before", "reset-mid", "truncated", "bad-json", "overloaded")
CLIENT_TIMEOUT_S = 30.0
PROPER_STATUSES = {429, 502, 503, 504}


def config(plain: FakeOpenAI, faulty: FaultyUpstream, db: Path) -> str:
    fast = "timeouts: {connect_s: 1, first_byte_s: 2, idle_s: 2, total_s: 5}"
    return f"""
server: {{shutdown_grace_s: 5}}
auth: {{master_key: {MASTER}}}
store: {{url: "sqlite:///{db}"}}
routing: {{deadline_s: 10, cooldown_s: 0.2, circuit_open_s: 0.2}}
providers:
  - {{name: plain, kind: openai, base_url: "{plain.base_url}", keys: [{{key: sk-plain}}]}}
  - {{name: f_oa, kind: openai, base_url: "{faulty.openai_url}",
      keys: [{{key: sk-f-1}}, {{key: sk-f-2}}], {fast}}}
  - {{name: f_an, kind: anthropic, base_url: "{faulty.anthropic_url}",
      keys: [{{key: sk-f-an}}], {fast}}}
models:
  - name: chat
    targets: [{{provider: plain, model: text}}]
    price: {{input_per_mtok: 2, output_per_mtok: 8}}
  - name: tools
    targets: [{{provider: plain, model: interleaved-2}}]
    price: {{input_per_mtok: 2, output_per_mtok: 8}}
  - name: flaky
    targets:
      - {{provider: f_oa, model: ok, priority: 0}}
      - {{provider: f_an, model: ok, priority: 1}}
    price: {{input_per_mtok: 3, output_per_mtok: 15}}
keys:
  - {{name: static, key: {STATIC}}}
"""


@dataclass
class Run:
    outcomes: Counter[str] = field(default_factory=Counter)
    problems: list[str] = field(default_factory=list)
    samples: list[tuple[float, int, int, int]] = field(default_factory=list)  # t, KiB, fds, done


def body_for(rng: random.Random, n: int, faulty: FaultyUpstream) -> dict[str, Any]:
    model = rng.choice(["chat", "chat", "tools", "flaky", "flaky"])  # FLAKY_SHARE: 2 of 5
    body: dict[str, Any] = {"model": model, "max_tokens": 64, "stream": rng.random() < 0.5}
    content = f"soak request {n}"
    if model == "flaky":
        if rng.random() < FAULT_P / FLAKY_SHARE:
            faulty.script(f"s{n}", [rng.choice(FAULTS)])
        content += f" tag:s{n}"
        if rng.random() < 0.5:
            body["tools"] = TOOLS
    if model == "tools":
        body["tools"] = [
            {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
            for name in ("search_documents", "get_user")
        ]
    if body["stream"]:
        body["stream_options"] = {"include_usage": True}
    body["messages"] = [{"role": "user", "content": content}]
    return body


def classify(status: int, stream: bool, data: bytes) -> str:
    if status != 200:
        error = json.loads(data).get("error")
        proper = status in PROPER_STATUSES and isinstance(error, dict) and error.get("message")
        return "error" if proper else f"bad-status-{status}"
    if not stream:
        choice = json.loads(data)["choices"][0]
        return "success" if choice["finish_reason"] in ("stop", "tool_calls") else "bad-unary"
    payloads = [ln[6:] for ln in data.split(b"\n") if ln.startswith(b"data: ")]
    if not payloads or payloads[-1] != b"[DONE]":
        return "bad-stream-end"
    last = json.loads(payloads[-2]) if len(payloads) > 1 else {}
    if "error" in last:
        return "error"  # a committed stream that failed: its error event, then [DONE]
    return "success"


async def client(
    session: aiohttp.ClientSession,
    url: str,
    keys: list[str],
    run: Run,
    faulty: FaultyUpstream,
    until: float,
    seed: int,
) -> None:
    rng = random.Random(seed)
    n = seed * 1_000_000
    next_at = 0.0
    while (now := time.monotonic()) < until:
        await asyncio.sleep(max(0.0, next_at - now))
        next_at = time.monotonic() + CLIENT_INTERVAL_S
        n += 1
        body = body_for(rng, n, faulty)
        headers = {"Authorization": f"Bearer {rng.choice(keys)}"}
        try:
            async with asyncio.timeout(CLIENT_TIMEOUT_S):
                async with session.post(url, json=body, headers=headers) as response:
                    data = await response.read()
            outcome = classify(response.status, body["stream"], data)
        except TimeoutError:
            outcome = "hang"
        except (aiohttp.ClientError, ValueError, KeyError, IndexError) as exc:
            outcome = f"broken-{type(exc).__name__}"
        run.outcomes[outcome] += 1
        if outcome not in ("success", "error") and len(run.problems) < 20:
            run.problems.append(f"{outcome}: {body['model']} stream={body['stream']}")


def sample(pid: int) -> tuple[int, int]:
    """(RSS in KiB, open fds) of `pid`."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


async def sampler(pid: int, run: Run, started: float, until: float, plain: FakeOpenAI) -> None:
    while True:
        plain.requests.clear()  # the fake records every request: not what is measured
        rss, fds = sample(pid)
        run.samples.append((time.monotonic() - started, rss, fds, sum(run.outcomes.values())))
        if time.monotonic() >= until:
            return
        await asyncio.sleep(SAMPLE_S)


def slope_kib_per_min(points: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS (KiB) over time (s), per minute."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_r = sum(r for _, r in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    cov = sum((t - mean_t) * (r - mean_r) for t, r in points)
    return cov / var * 60 if var else 0.0


async def create_key(url: str) -> str:
    headers = {"Authorization": f"Bearer {MASTER}"}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + "/admin/keys", json={"name": "soak", "budget_usd": 1000}, headers=headers
        ) as response,
    ):
        made: dict[str, Any] = await response.json()
        return str(made["key"])


async def soak(gw: Gateway, plain: FakeOpenAI, faulty: FaultyUpstream, seconds: float) -> Run:
    run = Run()
    keys = [MASTER, STATIC, await create_key(gw.url)]
    started = time.monotonic()
    until = started + seconds
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        url = gw.url + "/v1/chat/completions"
        clients = [
            client(session, url, keys, run, faulty, until, seed) for seed in range(CONCURRENCY)
        ]
        await asyncio.gather(sampler(gw.proc.pid, run, started, until, plain), *clients)
    return run


def report(run: Run, seconds: float, out: Path) -> dict[str, Any]:
    with (out / "samples.csv").open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["t_s", "rss_kib", "fds", "requests_done"])
        writer.writerows(run.samples)
    warmup = min(WARMUP_MAX_S, seconds / 4)
    after = [s for s in run.samples if s[0] >= warmup]
    rss = [s[1] for s in after]
    fds = [s[2] for s in after]
    return {
        "seconds": seconds,
        "warmup_s": warmup,
        "requests": sum(run.outcomes.values()),
        "outcomes": dict(run.outcomes),
        "rss_slope_kib_per_min": round(slope_kib_per_min([(s[0], s[1]) for s in after]), 1),
        "rss_kib_after_warmup": [min(rss, default=0), max(rss, default=0)],
        "rss_kib_start_end": [run.samples[0][1], run.samples[-1][1]] if run.samples else [],
        "fds_after_warmup": [min(fds, default=0), max(fds, default=0)],
        "samples": len(run.samples),
        "problems": run.problems,
        "csv": str(out / "samples.csv"),
    }


def main() -> int:
    seconds = float(os.environ.get("SOAK_SECONDS", "600"))
    out = Path(os.environ.get("SOAK_OUT") or tempfile.mkdtemp(prefix="gateway-soak-"))
    out.mkdir(parents=True, exist_ok=True)
    plain, faulty = FakeOpenAI().start(), FaultyUpstream().start()
    gw = start_gateway(config(plain, faulty, out / "gw.db"), out)
    try:
        run = asyncio.run(soak(gw, plain, faulty, seconds))
    finally:
        stop_gateway(gw)
        plain.stop()
        faulty.stop()
    summary = report(run, seconds, out)
    summary["injected"] = dict(faulty.injected())
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    o = run.outcomes
    print(
        f"soak: seconds={seconds:g} requests={summary['requests']} successes={o['success']} "
        f"proper_errors={o['error']} hangs={o['hang']} "
        f"other={summary['requests'] - o['success'] - o['error'] - o['hang']} "
        f"rss_slope={summary['rss_slope_kib_per_min']} KiB/min "
        f"rss={summary['rss_kib_after_warmup'][0]}..{summary['rss_kib_after_warmup'][1]} KiB "
        f"fds={summary['fds_after_warmup'][0]}..{summary['fds_after_warmup'][1]} "
        f"(after {summary['warmup_s']:g}s warm-up; samples in {summary['csv']})"
    )
    bad = summary["requests"] - o["success"] - o["error"]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
