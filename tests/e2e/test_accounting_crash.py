"""A gateway on sqlite killed with SIGKILL in the middle of a load, then restarted: every
answer a client received whole was settled before it left (nothing acknowledged is lost),
and the only spend beyond the acknowledged is that of requests in flight at the kill, each
of which was settled and then lost its answer with the process."""

from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.request
from decimal import Decimal
from pathlib import Path
from typing import Any

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = "sk-master-crash-e2e"
CLIENTS = 8


def config(db: Path, base_url: str) -> str:
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: "sqlite:///{db}"}}
providers:
  - {{name: up, kind: openai, base_url: "{base_url}", keys: [{{key: k}}]}}
models:
  - name: priced
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 2, output_per_mtok: 8, cached_input_per_mtok: 0.5}}
"""


def request(gw: Gateway, stream: bool) -> urllib.request.Request:
    body: dict[str, Any] = {"model": "priced", "messages": [{"role": "user", "content": "hi"}]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    req = urllib.request.Request(gw.url + "/v1/chat/completions", data=json.dumps(body).encode())
    req.add_header("Authorization", f"Bearer {MASTER}")
    req.add_header("Content-Type", "application/json")
    return req


def acknowledged_cost(gw: Gateway, stream: bool) -> int:
    """The cost (nanodollars) of one request whose answer arrived whole."""
    with urllib.request.urlopen(request(gw, stream), timeout=10) as r:
        if not stream:
            r.read()
            return int(Decimal(r.headers["x-gateway-cost-usd"]) * 10**9)
        lines = r.read().split(b"\n\n")
    events = [line[6:] for line in lines if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"  # whole: anything short of this is not acknowledged
    return int(Decimal(str(json.loads(events[-2])["usage"]["cost_usd"])) * 10**9)


def test_sigkill_loses_no_acknowledged_spend(tmp_path: Path) -> None:
    fake = FakeOpenAI().start()
    db = tmp_path / "spend.db"
    for run in ("first", "second"):
        (tmp_path / run).mkdir()
    gw = start_gateway(config(db, fake.base_url), tmp_path / "first")
    acknowledged: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def load(n: int) -> None:
        i = 0
        while not stop.is_set():
            i += 1
            try:
                cost = acknowledged_cost(gw, stream=(n + i) % 2 == 0)
            except (OSError, http.client.HTTPException, AssertionError, ValueError, KeyError):
                return  # the gateway died under this request: not acknowledged
            with lock:
                acknowledged.append(cost)

    threads = [threading.Thread(target=load, args=(n,), name=f"load-{n}") for n in range(CLIENTS)]
    try:
        for t in threads:
            t.start()
        deadline = time.monotonic() + 20
        while len(acknowledged) < 150 and time.monotonic() < deadline:
            time.sleep(0.01)
        gw.proc.kill()  # SIGKILL, mid-load
        gw.proc.wait()
        stop.set()
        for t in threads:
            t.join(15)
        again = start_gateway(config(db, fake.base_url), tmp_path / "second")
        try:
            req = urllib.request.Request(again.url + "/admin/spend")
            req.add_header("Authorization", f"Bearer {MASTER}")
            with urllib.request.urlopen(req, timeout=10) as r:
                spend = json.loads(r.read())
        finally:
            stop_gateway(again)
    finally:
        stop.set()
        fake.stop()
    settled, requests = spend["total_nanos"], spend["models"][0]["requests"]
    print(
        f"crash sqlite: acknowledged={len(acknowledged)} settled_requests={requests} "
        f"acknowledged_nanos={sum(acknowledged)} settled_nanos={settled}"
    )
    assert len(acknowledged) >= 150
    extra = requests - len(acknowledged)
    assert 0 <= extra <= CLIENTS  # at most one request per client was in flight
    # the settled spend is the acknowledged spend plus whole requests that were in flight
    costs = set(acknowledged)
    assert len(costs) == 2  # streamed (with cached tokens) and not
    a, b = sorted(costs)
    surplus = settled - sum(acknowledged)
    assert any(i * a + (extra - i) * b == surplus for i in range(extra + 1)), surplus
