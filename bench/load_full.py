"""bench.load --full: the gateway configured as the performance targets demand, and the
checks that it accounted for every request it answered.

The sqlite store (in the run's temp dir), a master key, requests sent with a virtual key
whose budget, rpm and tpm are far above any load this machine can make (so each request is
admitted and settled in the store, and none is refused), a price for the model (so that each
admission reserves budget) and a provider with two keys that routing balances between.
Metrics are always on (`GET /metrics`). `--store redis` puts the store in a redis-server of the
run's own (Debian's, on a free loopback port, persisting nothing) instead, to see what it costs.
"""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

from bench.load_report import Cell

MASTER_KEY = "bench-master"
VIRTUAL_KEY = {"name": "bench", "budget_usd": 1_000_000, "rpm": 10**8, "tpm": 10**11}


class AdminError(Exception):
    """The admin API did not answer as expected."""


def full_config(port: int, upstream_port: int, store: Path | str, model: str, upstream: str) -> str:
    """The gateway's config for --full (see the module docstring); `store` is the sqlite
    file, or a store URL (--store redis)."""
    url = store if isinstance(store, str) else f"sqlite:///{store}"
    return (
        f"server: {{host: 127.0.0.1, port: {port}}}\n"
        f"auth: {{master_key: {MASTER_KEY}}}\n"
        f'store: {{url: "{url}"}}\n'
        "providers:\n"
        f'  - {{name: up, kind: openai, base_url: "http://127.0.0.1:{upstream_port}/v1",'
        " keys: [{key: bench-key-a}, {key: bench-key-b}]}\n"
        "models:\n"
        f"  - {{name: {model}, targets: [{{provider: up, model: {upstream}}}],"
        " price: {input_per_mtok: 1.0, output_per_mtok: 2.0}}\n"
    )


OBSERVE_MODES = ("none", "log-sqlite", "log-postgres", "tracing", "cache-hit", "cache-miss")
# the response cache in this process's memory: wrk's one request is a hit after the first
# (cache-hit), or every request is another (cache-miss: bench/wrk_chat.lua's BENCH_UNIQUE)
CACHE_CONFIG = "cache: {mode: exact, store: memory}\n"


def observe_config(mode: str, workdir: Path, upstream_port: int, postgres_url: str | None) -> str:
    """What --observe adds to the config: the request log in its own sqlite file or in a
    PostgreSQL of the run's own, or traces of every request (sample_ratio 1) exported to the
    fake upstream's /v1/traces, or the response cache (cache-hit, cache-miss)."""
    if mode == "log-sqlite":
        return f'request_log: {{sink: "sqlite:///{workdir / "request-log.db"}"}}\n'
    if mode == "log-postgres":
        return f'request_log: {{sink: "{postgres_url}"}}\n'
    if mode == "tracing":
        return (
            f'tracing: {{otlp_endpoint: "http://127.0.0.1:{upstream_port}", sample_ratio: 1.0}}\n'
        )
    if mode in ("cache-hit", "cache-miss"):
        return CACHE_CONFIG
    return ""


def admin(base_url: str, method: str, path: str, body: object = None) -> dict[str, object]:
    """One call of the gateway's admin API with the master key."""
    request = urllib.request.Request(
        base_url + path,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Authorization": f"Bearer {MASTER_KEY}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            answer = json.loads(response.read())
    except (OSError, ValueError) as error:
        raise AdminError(f"{method} {path}: {error!r}") from error
    if not isinstance(answer, dict):
        raise AdminError(f"{method} {path}: not a JSON object: {answer!r}")
    return answer


def create_key(base_url: str) -> tuple[str, str]:
    """Makes the virtual key; returns its id and its secret."""
    created = admin(base_url, "POST", "/admin/keys", VIRTUAL_KEY)
    return str(created["id"]), str(created["key"])


def accounting_report(chat_url: str, key_id: str, cells: list[Cell]) -> dict[str, object]:
    """What the store settled for the key against the requests wrk counted answered through
    the gateway at `chat_url` (the store also holds the checks', the warm-ups' and those in
    flight when a run ended), and whether /metrics counts requests. Raises AdminError if
    fewer were settled than answered."""
    answered = sum(c.gateway.requests for c in cells if c.gateway is not None)
    base_url = chat_url.removesuffix("/v1/chat/completions")
    spend = admin(base_url, "GET", "/admin/spend")
    rows = spend.get("keys")
    ours = [r for r in (rows if isinstance(rows, list) else []) if r.get("key_id") == key_id]
    settled = sum(int(r.get("requests", 0)) for r in ours)
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        metrics = response.read().decode()
    # a response-cache hit is charged nothing and settles nothing: it is counted there
    hits = sum(
        int(float(line.rsplit(" ", 1)[1]))
        for line in metrics.splitlines()
        if line.startswith("gateway_cache_requests_total{") and 'result="hit"' in line
    )
    report: dict[str, object] = {
        "settled_requests": settled,
        "cache_hits": hits,
        "answered_requests": answered,
        "spend_usd": sum(float(r.get("spend_usd", 0.0)) for r in ours),
        "metrics_request_series": metrics.count("gateway_requests_total{"),
    }
    if settled + hits < answered:
        raise AdminError(f"fewer requests settled than answered: {report}")
    return report


def metrics_report(chat_url: str, answered: int, cut_off_max: int) -> dict[str, object]:
    """/metrics counts every request answered (`answered`, wrk's and the checks') once, over
    all workers: its gateway_requests_total sum is at least that, at most `cut_off_max` more
    (requests in flight when a wrk run ended), and no series is exposed twice. Raises
    AdminError otherwise."""
    base_url = chat_url.removesuffix("/v1/chat/completions")
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    series = [line for line in text.splitlines() if line and not line.startswith("#")]
    requests = [line for line in series if line.startswith("gateway_requests_total{")]
    counted = sum(int(float(line.rsplit(" ", 1)[1])) for line in requests)
    names = [line.rsplit(" ", 1)[0] for line in series]
    report: dict[str, object] = {
        "metrics_requests_counted": counted,
        "requests_answered": answered,
        "requests_cut_off_max": cut_off_max,
        "metrics_duplicate_series": len(names) - len(set(names)),
    }
    if not answered <= counted <= answered + cut_off_max or report["metrics_duplicate_series"]:
        raise AdminError(f"/metrics does not count the requests answered: {report}")
    return report


def redis_argv(port: int, directory: Path) -> list[str]:
    """A redis-server of the run's own, persisting nothing (--store redis)."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise AdminError("redis-server is not on PATH: run tests/install_deps.sh")
    return [
        binary,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(directory),
    ]
