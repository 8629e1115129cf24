"""Reload under load, with `--workers 2`: a steady mix of streams and non-streamed answers
while the config file is rewritten valid, invalid, valid. No request may fail, a stream in
flight across a reload must end whole, and every new model must be served by every worker
within 2 s of the write."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.server.reloading import MASTER
from tests.server.reloading import PICKUP_S
from tests.server.reloading import Served
from tests.server.reloading import launch
from tests.server.reloading import rewrite
from tests.upstreams.openai_upstream import FakeOpenAI

AUTH = {"Authorization": f"Bearer {MASTER}"}
CLIENTS = 10
MAX_REQUESTS = 400  # bounded whatever the timing
MAX_LOAD_S = 15.0


@pytest.fixture(scope="module")
def upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


def config(upstream: FakeOpenAI, models: list[str]) -> str:
    listed = "".join(
        f"  - {{name: {name}, targets: [{{provider: up, model: text}}]}}\n" for name in models
    )
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: "memory://"}}
providers:
  - {{name: up, kind: openai, base_url: "{upstream.base_url}", keys: [{{key: sk-up-1}}]}}
  - {{name: slow, kind: mock, mock: {{chunks: 6, delay_s: 0.05}}}}
models:
  - {{name: steady, targets: [{{provider: up, model: text}}]}}
  - {{name: slowly, targets: [{{provider: slow, model: mock}}]}}
{listed}"""


class Load:
    """CLIENTS loops of requests on keep-alive connections until told to stop."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.done = 0
        self.failures: list[str] = []
        self.stop = asyncio.Event()

    async def run(self) -> None:
        async with aiohttp.ClientSession(headers=AUTH) as session:
            await asyncio.gather(*(self._loop(session, i) for i in range(CLIENTS)))

    async def _loop(self, session: aiohttp.ClientSession, i: int) -> None:
        kinds = [("steady", False), ("steady", True), ("slowly", True)]
        n = i
        while not self.stop.is_set() and self.done < MAX_REQUESTS:
            model, stream = kinds[n % len(kinds)]
            n += 1
            try:
                problem = await self._one(session, model, stream)
            except (aiohttp.ClientError, TimeoutError) as exc:
                problem = f"{type(exc).__name__}: {exc}"
            self.done += 1
            if problem:
                self.failures.append(f"{model} stream={stream}: {problem}")

    async def _one(self, session: aiohttp.ClientSession, model: str, stream: bool) -> str:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
        timeout = aiohttp.ClientTimeout(total=10)
        async with session.post(
            self.url + "/v1/chat/completions", json=body, timeout=timeout
        ) as response:
            raw = await response.read()
        if response.status != 200:
            return f"status {response.status}: {raw[:200]!r}"
        if not stream:
            text = json.loads(raw)["choices"][0]["message"]["content"]
            return "" if text == "Hello, world!" else f"text {text!r}"
        events = [line[6:] for line in raw.decode().splitlines() if line.startswith("data: ")]
        if events[-1:] != ["[DONE]"] or any('"error"' in e for e in events):
            return f"stream cut or failed: {raw[-200:]!r}"
        return ""


async def probe(url: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    """One request on a connection of its own: any worker may answer it."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(headers=AUTH, connector=connector) as session:
        method = session.post if body is not None else session.get
        async with method(url + path, json=body, timeout=aiohttp.ClientTimeout(total=5)) as r:
            return r.status, await r.json(content_type=None)


async def workers_on(url: str, sha256: str, result: str, pids: set[int]) -> float:
    """Seconds until every worker in `pids` reported the file `sha256` with `result`."""
    started = time.monotonic()
    reached: set[int] = set()
    while reached != pids:
        assert time.monotonic() - started < PICKUP_S, f"only {reached} of {pids} in time"
        _, shown = await probe(url, "/admin/config")
        last = shown["last_reload"] or {}
        if last.get("sha256") == sha256 and last.get("result") == result:
            reached.add(shown["pid"])
        await asyncio.sleep(0.02)
    return time.monotonic() - started


async def served_everywhere(url: str, model: str, pids: set[int]) -> None:
    """`model` answers on 12 fresh connections in a row (both workers, but for 1 in 2**11)."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
    for _ in range(12):
        status, answer = await probe(url, "/v1/chat/completions", body)
        assert status == 200, answer


async def worker_pids(url: str) -> set[int]:
    pids: set[int] = set()
    for _ in range(200):
        pids.add((await probe(url, "/admin/config"))[1]["pid"])
        if len(pids) == 2:
            return pids
    raise AssertionError("one worker answered 200 fresh connections")


@pytest.fixture
def gateway(upstream: FakeOpenAI, tmp_path: Path) -> Iterator[Served]:
    path = tmp_path / "gateway.yaml"
    path.write_text(config(upstream, []))
    served = launch(path, "--workers", "2")
    yield served
    served.stop()


async def test_reload_under_load_in_every_worker(gateway: Served, upstream: FakeOpenAI) -> None:
    url = gateway.url
    pids = await worker_pids(url)
    load = Load(url)
    running = asyncio.get_running_loop().create_task(load.run())
    try:
        await asyncio.sleep(0.5)
        steps = [
            (config(upstream, ["second"]), "ok", "second"),
            (config(upstream, ["second"]).replace("second,", "second, tools: maybe,"), "error", ""),
            (config(upstream, ["second", "third"]), "ok", "third"),
        ]
        for text, result, new_model in steps:
            rewrite(gateway.path, text)
            sha256 = hashlib.sha256(text.encode()).hexdigest()
            await workers_on(url, sha256, result, pids)
            if new_model:
                await served_everywhere(url, new_model, pids)
            await served_everywhere(url, "second", pids)  # an invalid file changed nothing
            await asyncio.sleep(0.3)  # streams in flight across each reload
    finally:
        load.stop.set()
        await asyncio.wait_for(running, MAX_LOAD_S)
    assert load.failures == []
    assert load.done >= 150, "the load did not run"
    # every request released what it held on the key it started with
    for _ in range(20):
        _, health = await probe(url, "/admin/health")
        assert all(k["in_flight"] == 0 for p in health["providers"] for k in p["keys"])
