"""The console of a gateway of two worker processes on one sqlite store: a session opened on
whichever worker answered the sign-in is known to every worker (fresh connections land on
either), and the overview, whichever worker draws it, counts every worker's requests."""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = "mk-console-workers"
REQUESTS = 40


@pytest.fixture
def gateway(tmp_path: Path) -> Iterator[Gateway]:
    fake = FakeOpenAI().start()
    config = f"""
store: {{url: "sqlite:///{tmp_path / "gw.db"}"}}
auth: {{master_key: {MASTER}}}
console: {{overview_interval_s: 1}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k1}}]}}
"""
    gw = start_gateway(config, tmp_path, ["--workers", "2"])
    yield gw
    stop_gateway(gw)
    fake.stop()


def call(gw: Gateway, method: str, path: str, body: Any = None, **headers: str) -> Any:
    """One request on a fresh connection (the kernel picks the worker)."""
    conn = http.client.HTTPConnection("127.0.0.1", gw.port, timeout=10)
    try:
        data = None if body is None else json.dumps(body)
        conn.request(
            method, path, body=data, headers={"Content-Type": "application/json", **headers}
        )
        answer = conn.getresponse()
        raw = answer.read()
        return answer.status, answer.getheader("Set-Cookie"), json.loads(raw) if raw else None
    finally:
        conn.close()


def test_sessions_and_the_overview_span_the_workers(gateway: Gateway) -> None:
    status, cookie, _ = call(gateway, "POST", "/ui/api/session", {"master_key": MASTER})
    assert status == 200
    session = cookie.split(";", 1)[0]
    # many connections at once, so both workers accept some (one at a time, an idle worker
    # may take them all); each must know the session opened on either
    with ThreadPoolExecutor(8) as pool:
        reads = list(
            pool.map(lambda _: call(gateway, "GET", "/ui/api/config", Cookie=session), range(48))
        )
        assert all(status == 200 for status, _, _ in reads), reads
        workers = {body["pid"] for _, _, body in reads}
        chat = {"model": "up/text", "messages": [{"role": "user", "content": "hi"}]}
        statuses = list(
            pool.map(
                lambda _: call(
                    gateway, "POST", "/v1/chat/completions", chat, Authorization=f"Bearer {MASTER}"
                )[0],
                range(REQUESTS),
            )
        )
    assert statuses == [200] * REQUESTS
    assert len(workers) == 2, "every connection went to one worker"
    deadline = time.monotonic() + 15
    seen: list[int] = []
    while time.monotonic() < deadline:
        status, _, overview = call(gateway, "GET", "/ui/api/overview", Cookie=session)
        assert status == 200
        seen.append(overview["totals"]["requests"])
        if seen[-1] >= REQUESTS and len(seen) >= 4:
            break
        time.sleep(0.3)
    assert seen[-1] == REQUESTS, seen  # every worker's requests, whichever worker answers
    assert sum(p["rps"] for p in overview["points"]) > 0
