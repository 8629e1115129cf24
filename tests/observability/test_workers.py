"""`gateway serve --workers 2`: one /metrics for all workers, whichever answers the scrape.

A real supervisor and two worker processes sharing the port. Requests go out on fresh
connections (the kernel spreads them over the workers) until the access log shows that both
workers served some; then every scrape must count every request. Then one worker is killed
while streams are open: its counts must stay (counters never go down) and its open streams
must leave `gateway_active_streams`.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from gateway.observability.segments import parse
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway

CONFIG = """
server: {shutdown_grace_s: 5}
store: {url: "memory://"}
providers:
  - {name: mock, kind: mock}
  - {name: slowmock, kind: mock, mock: {chunks: 10, delay_s: 0.3}}
models:
  - {name: fast, targets: [{provider: mock, model: mock}]}
  - {name: slow, targets: [{provider: slowmock, model: mock}]}
"""
FAST = {"route": "/v1/chat/completions", "model": "fast", "provider": "mock"}


def post_chat(gw: Gateway, model: str, stream: bool = False) -> dict[str, object] | None:
    """One request on a fresh connection; its JSON answer (None for a stream)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    request = urllib.request.Request(
        gw.url + "/v1/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Connection": "close"},
    )
    with urllib.request.urlopen(request, timeout=20) as response:
        data = response.read()
    return None if stream else json.loads(data)


def scrape(gw: Gateway) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    request = urllib.request.Request(gw.url + "/metrics", headers={"Connection": "close"})
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    got: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return got.get((name, tuple(sorted(labels.items()))), 0.0)


def served_by(log: Path) -> dict[int, int]:
    """Access-log lines per worker pid."""
    pids: dict[int, int] = {}
    text = log.read_text()
    # a worker may be writing right now: only whole lines count (each batch is written
    # in line-aligned pieces, so a line is never split by another worker's)
    for line in text[: text.rfind("\n") + 1].splitlines():
        if line.startswith('{"ts"'):
            pid = json.loads(line)["pid"]
            pids[pid] = pids.get(pid, 0) + 1
    return pids


def wait_for(check: object, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if callable(check) and check():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def test_every_scrape_counts_every_worker(tmp_path: Path) -> None:
    gw = start_gateway(CONFIG, tmp_path, ["--workers", "2"])
    try:
        sent, output_tokens = 0, 0
        while sent < 20 or len(served_by(gw.log)) < 2:
            answer = post_chat(gw, "fast")
            assert answer is not None
            usage = answer["usage"]
            assert isinstance(usage, dict)
            output_tokens += usage["completion_tokens"]
            sent += 1
            assert sent < 400, f"one worker served everything: {served_by(gw.log)}"
        # access lines leave in batches (at least every 0.2 s): all of them, once each
        wait_for(lambda: sum(served_by(gw.log).values()) == sent, "every access line")
        workers = served_by(gw.log)
        for _ in range(8):  # fresh connections: the scrapes land on both workers
            got = scrape(gw)
            assert value(got, "gateway_requests_total", **FAST, status_class="2xx") == sent
            assert value(got, "gateway_request_duration_seconds_count", **FAST) == sent
            tokens = value(
                got, "gateway_tokens_total", model="fast", provider="mock", kind="output"
            )
            assert tokens == output_tokens

        # streams open on both workers: the gauge is their sum
        results: list[BaseException | None] = []

        def stream() -> None:
            try:
                post_chat(gw, "slow", stream=True)
                results.append(None)
            except (OSError, urllib.error.URLError) as exc:  # its worker was killed
                results.append(exc)

        threads = [threading.Thread(target=stream) for _ in range(6)]
        for thread in threads:
            thread.start()
        wait_for(
            lambda: value(scrape(gw), "gateway_active_streams", route="/v1/chat/completions") == 6,
            "six active streams",
        )
        segments = {pid: segment_of(pid) for pid in workers}
        open_streams = {pid: streams_in(path) for pid, path in segments.items()}
        assert sum(open_streams.values()) == 6
        victim = max(open_streams, key=lambda pid: open_streams[pid])  # one with streams
        os.kill(victim, signal.SIGKILL)
        for thread in threads:
            thread.join(20)
        assert len(results) == 6
        assert sum(r is not None for r in results) == open_streams[victim]  # they were cut
        # the supervisor starts another worker; the dead one's streams are no longer open
        wait_for(lambda: "starting another" in gw.log.read_text(), "a restarted worker")
        # a surviving stream's gauge drops just after its last byte left (the client can
        # have it first): wait for that, then every scrape must say 0
        wait_for(
            lambda: value(scrape(gw), "gateway_active_streams", route="/v1/chat/completions") == 0,
            "no active streams",
        )
        for _ in range(6):
            got = scrape(gw)
            assert value(got, "gateway_active_streams", route="/v1/chat/completions") == 0
            assert value(got, "gateway_requests_total", **FAST, status_class="2xx") == sent
        assert value(got, "gateway_requests_total", **FAST, status_class="2xx") == sent
        post_chat(gw, "fast")
        assert value(scrape(gw), "gateway_requests_total", **FAST, status_class="2xx") == sent + 1
    finally:
        assert stop_gateway(gw) in (0, 1)
    # the supervisor removed its metrics directory (the dead worker's file included)
    assert not segments[victim].parent.exists()


def segment_of(pid: int) -> Path:
    """The file where worker `pid` keeps its metric values (the supervisor's directory)."""
    found = list(Path(tempfile.gettempdir()).glob(f"gateway-metrics-*/worker-{pid}.seg"))
    assert len(found) == 1, found
    return found[0]


def streams_in(path: Path) -> float:
    """One worker's own `gateway_active_streams`, read from its file."""
    for key, values in parse(path.read_bytes()):
        if json.loads(key)[0] == "gateway_active_streams":
            return values[0]
    return 0.0
