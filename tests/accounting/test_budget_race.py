"""The budget race: 200 requests at concurrency 32 against one key with a small budget,
spread over two gateways sharing one store, as two workers or two replicas do: two
Applications in the test's loop on sqlite (one file) and on a real redis-server, and two real
`python -m gateway serve` processes on one sqlite file (`sqlite-processes`: two processes
contend for the file's write lock, which two Applications on one loop barely do). The
settled spend may exceed the budget by at most one request's reservation (by nothing, when
every request sets its max tokens, as these do)."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.accounting.inprocess import INPUT
from tests.accounting.inprocess import MASTER
from tests.accounting.inprocess import OUTPUT
from tests.accounting.inprocess import accounting_gateway
from tests.accounting.inprocess import bearer
from tests.accounting.inprocess import config_text
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.redis_server import RedisServer
from tests.upstreams.openai_upstream import FakeOpenAI

REQUESTS, CONCURRENCY, MAX_TOKENS = 200, 32, 10
BUDGET_USD = Decimal("0.005")


def body(i: int) -> dict[str, Any]:
    stream = i % 2 == 0
    out: dict[str, Any] = {
        "model": "priced",
        "max_tokens": MAX_TOKENS,
        "messages": [{"role": "user", "content": f"request {i:04d}"}],
    }
    if stream:
        out |= {"stream": True, "stream_options": {"include_usage": True}}
    return out


def reserve_usd(payload: dict[str, Any]) -> Decimal:
    """What the gateway reserves for `payload`: its prompt estimate (body characters / 4)
    at the input price plus max_tokens at the output price."""
    prompt = -(-len(json.dumps(payload)) // 4)
    return (prompt * INPUT + MAX_TOKENS * OUTPUT) / Decimal(10**6)


async def _in_process(stack: AsyncExitStack, url: str, fake: FakeOpenAI) -> list[str]:
    """Two Applications on `url`, in this loop: their base URLs."""
    urls = []
    for _ in range(2):
        server, _ = await stack.enter_async_context(accounting_gateway(url, fake=fake))
        urls.append(str(server.make_url("")).rstrip("/"))
    return urls


def _processes(stack: AsyncExitStack, url: str, fake: FakeOpenAI, tmp: Path) -> list[str]:
    """Two gateway processes on `url` with the same config: their base URLs; each stopped
    (by its own PID) when the stack closes."""
    urls = []
    for name in ("first", "second"):
        folder = tmp / name
        folder.mkdir()
        gateway = start_gateway(config_text(fake.base_url, url), folder)
        stack.callback(stop_gateway, gateway)
        urls.append(gateway.url)
    return urls


@pytest.mark.parametrize("store", ["sqlite", "redis", "sqlite-processes"])
async def test_budget_race(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if store.startswith("sqlite"):
        url = f"sqlite:///{tmp_path}/race.db"
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url()
    fake = FakeOpenAI().start()
    try:
        async with AsyncExitStack() as stack:
            if store == "sqlite-processes":
                first, second = _processes(stack, url, fake, tmp_path)
            else:
                first, second = await _in_process(stack, url, fake)
            session = await stack.enter_async_context(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY * 2))
            )
            async with session.post(
                first + "/admin/keys",
                json={"name": "race", "budget_usd": float(BUDGET_USD)},
                headers=bearer(MASTER),
            ) as r:
                assert r.status == 201, await r.text()
                key = await r.json()
            slots = asyncio.Semaphore(CONCURRENCY)
            statuses: list[int] = []

            async def one(i: int) -> None:
                gateway = first if i % 2 else second
                async with (
                    slots,
                    session.post(
                        gateway + "/v1/chat/completions",
                        json=body(i),
                        headers=bearer(key["key"]),
                    ) as r,
                ):
                    await r.read()
                    statuses.append(r.status)

            await asyncio.gather(*(one(i) for i in range(REQUESTS)))
            async with session.get(
                second + f"/admin/keys/{key['id']}", headers=bearer(MASTER)
            ) as r:
                view = await r.json()
    finally:
        fake.stop()
    settled = Decimal(view["spend_nanos"]) / Decimal(10**9)
    reserve = max(reserve_usd(body(i)) for i in range(REQUESTS))
    overshoot = max(settled - BUDGET_USD, Decimal(0))
    served = statuses.count(200)
    print(
        f"budget race {store}: requests={REQUESTS} concurrency={CONCURRENCY} served={served} "
        f"budget={BUDGET_USD} settled={settled} overshoot={overshoot} reserve={reserve}"
    )
    assert set(statuses) == {200, 429}
    assert view["reserved_nanos"] == 0  # every reservation settled or released
    assert settled <= BUDGET_USD + reserve
    assert settled >= BUDGET_USD / 2  # the budget was used, not refused wholesale
