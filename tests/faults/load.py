"""A bounded load of priced chat completions with one virtual key, for the store-fault runs.

Each request carries its own `x-request-id` (named in the gateway's log line about a lost
settle, beside the ticket the gateway minted, so the line can be matched to it) and ends as
exactly one outcome:

  success       200 with the whole answer and its cost (`x-gateway-cost-usd`, or for a
                stream the usage chunk's `cost_usd` followed by `[DONE]`)
  store_error   503 `store_unavailable` with `Retry-After`: the documented fail-closed answer
  other_error   any other status or shape (the fault runs expect none)
  hang          no end within CLIENT_TIMEOUT_S
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from dataclasses import field
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp

CLIENT_TIMEOUT_S = 15.0  # past the sqlite busy timeout (5 s) plus an answer
NOT_RECORDED = re.compile(r"spend of request (\S+) \(ticket \S+\) not recorded")


@dataclass
class Tally:
    outcomes: Counter[str] = field(default_factory=Counter)
    costs: dict[str, int] = field(default_factory=dict)  # request id -> nanodollars, successes
    problems: list[str] = field(default_factory=list)
    # (seconds since the start, outcome) of each request, in the order they ended
    timeline: list[tuple[float, str]] = field(default_factory=list)
    slowest_s: float = 0.0

    @property
    def requests(self) -> int:
        return sum(self.outcomes.values())

    def line(self, name: str, **extra: object) -> str:
        o = self.outcomes
        tail = "".join(f" {k}={v}" for k, v in extra.items())
        return (
            f"fault {name}: requests={self.requests} answers={o['success']} "
            f"proper_errors={o['store_error']} other_errors={o['other_error']} "
            f"hangs={o['hang']} slowest={self.slowest_s:.1f}s{tail}"
        )


def chat_body(n: int) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "priced",
        "max_tokens": 16,
        "messages": [{"role": "user", "content": f"request {n}"}],
    }
    if n % 2:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    return body


def nanos(usd: str | float) -> int:
    return int((Decimal(str(usd)) * 1_000_000_000).to_integral_value())


def stream_cost(data: bytes) -> int | None:
    """The cost of a whole, error-free stream, or None."""
    payloads = [
        line.removeprefix(b"data: ") for line in data.split(b"\n") if line.startswith(b"data: ")
    ]
    if not payloads or payloads[-1] != b"[DONE]":
        return None
    cost = None
    for payload in payloads[:-1]:
        event = json.loads(payload)
        if "error" in event:
            return None
        usage = event.get("usage")
        if usage and "cost_usd" in usage:
            cost = nanos(usage["cost_usd"])
    return cost


async def one(session: aiohttp.ClientSession, url: str, key: str, n: int) -> tuple[str, str, int]:
    """(outcome, request id, cost in nanodollars) of request `n`."""
    request_id = f"flt-{uuid.uuid4().hex[:12]}-{n}"
    headers = {"Authorization": f"Bearer {key}", "x-request-id": request_id}
    try:
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            async with session.post(url, json=chat_body(n), headers=headers) as response:
                data = await response.read()
    except TimeoutError:
        return "hang", request_id, 0
    except aiohttp.ClientError:
        return "other_error", request_id, 0
    if response.status == 200:
        if n % 2:
            cost = stream_cost(data)
        else:
            given = response.headers.get("x-gateway-cost-usd")
            answer = json.loads(data)
            whole = answer.get("choices", [{}])[0].get("finish_reason") == "stop"
            cost = nanos(given) if given is not None and whole else None
        return ("success", request_id, cost) if cost is not None else ("other_error", "", 0)
    if response.status == 503:
        error = json.loads(data).get("error", {})
        retry_after = response.headers.get("Retry-After", "")
        if error.get("code") == "store_unavailable" and retry_after.isdigit():
            return "store_error", request_id, 0
    return "other_error", f"{response.status} {data[:200]!r}", 0


async def run_load(
    base_url: str,
    key: str,
    *,
    seconds: float,
    concurrency: int,
    fault: Any = None,
    rate: float | None = None,
) -> Tally:
    """For `seconds`, `concurrency` clients send requests back to back; or, with `rate`,
    requests start at that many per second whatever the answers (at most `concurrency` in
    flight), so new requests keep arriving while earlier ones wait on the store. `fault` (a
    coroutine) runs alongside and is awaited before the tally is returned."""
    tally = Tally()
    url = base_url + "/v1/chat/completions"
    started = time.monotonic()
    counter = iter(range(1 << 30))
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def request() -> None:
            sent = time.monotonic()
            outcome, request_id, cost = await one(session, url, key, next(counter))
            tally.slowest_s = max(tally.slowest_s, time.monotonic() - sent)
            tally.outcomes[outcome] += 1
            tally.timeline.append((time.monotonic() - started, outcome))
            if outcome == "success":
                tally.costs[request_id] = cost
            elif outcome != "store_error":
                tally.problems.append(f"{outcome}: {request_id}")

        async def client() -> None:
            while time.monotonic() - started < seconds:
                await request()

        async def arrivals(interval: float) -> None:
            slots = asyncio.Semaphore(concurrency)
            tasks = set()

            async def limited() -> None:
                try:
                    await request()
                finally:
                    slots.release()

            n = 0
            while (due := started + n * interval) < started + seconds:
                await asyncio.sleep(max(0.0, due - time.monotonic()))
                await slots.acquire()
                task = asyncio.create_task(limited())
                tasks.add(task)
                task.add_done_callback(tasks.discard)
                n += 1
            await asyncio.gather(*tasks)

        load = [arrivals(1 / rate)] if rate else [client() for _ in range(concurrency)]
        await asyncio.gather(*load, *([fault] if fault is not None else []))
    return tally


def not_recorded(log: Path) -> set[str]:
    """The request ids whose settle the gateway logged as lost."""
    return set(NOT_RECORDED.findall(log.read_text(errors="replace")))


_ESTABLISHED = "01"


def _outbound_established(pid: int, listen_port: int) -> set[str]:
    """Inodes of the process's established TCP sockets that it opened itself (its local port
    is not the one it listens on): the upstream and store pools' connections."""
    inodes: set[str] = set()
    for table in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except FileNotFoundError:
            continue
        for line in lines:
            fields = line.split()
            local_port = int(fields[1].rsplit(":", 1)[1], 16)
            if fields[3] == _ESTABLISHED and local_port != listen_port:
                inodes.add(fields[9])
    return inodes


def fd_count(pid: int, listen_port: int) -> int:
    """The process's descriptors, less its open pooled connections out (to the upstream or
    the store). A pool keeps as many idle connections as it once had in flight (bounded by
    its idle cap) and a burst after a fault legitimately grows it; a leak is anything else:
    a file, a listening or half-closed socket, a client connection left open."""
    pooled = {f"socket:[{inode}]" for inode in _outbound_established(pid, listen_port)}
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except FileNotFoundError:  # closed while we looked
            continue
        count += target not in pooled
    return count


async def settled_fd_count(pid: int, listen_port: int, bound: int) -> int:
    """The fd count once closes in flight are done (waits at most 3 s for it to be <= bound)."""
    count = fd_count(pid, listen_port)
    for _ in range(30):
        if count <= bound:
            break
        await asyncio.sleep(0.1)
        count = fd_count(pid, listen_port)
    return count


async def admin(base_url: str, master: str, method: str, path: str, body: Any = None) -> Any:
    headers = {"Authorization": f"Bearer {master}"}
    timeout = aiohttp.ClientTimeout(total=10)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(method, base_url + path, json=body, headers=headers) as r,
    ):
        assert r.status in (200, 201), (r.status, await r.text())
        return await r.json()
