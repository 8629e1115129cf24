"""The budget race: 200 requests at concurrency 32 against one key with a small budget,
spread over two gateways (Applications) sharing one store, as two workers or two replicas
do: on sqlite (one file) and on a real redis-server. The settled spend may exceed the
budget by at most one request's reservation (by nothing, when every request sets its max
tokens, as these do)."""

from __future__ import annotations

import asyncio
import json
from contextlib import AsyncExitStack
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.accounting.inprocess import (
    INPUT,
    OUTPUT,
    accounting_gateway,
    bearer,
    new_key,
)
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


@pytest.mark.parametrize("store", ["sqlite", "redis"])
async def test_budget_race(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    if store == "sqlite":
        url = f"sqlite:///{tmp_path}/race.db"
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        url = server.url()
    fake = FakeOpenAI().start()
    try:
        async with AsyncExitStack() as stack:
            first, _ = await stack.enter_async_context(accounting_gateway(url, fake=fake))
            second, _ = await stack.enter_async_context(accounting_gateway(url, fake=fake))
            session = await stack.enter_async_context(
                aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY * 2))
            )
            key = await new_key(session, first, budget_usd=float(BUDGET_USD))
            slots = asyncio.Semaphore(CONCURRENCY)
            statuses: list[int] = []

            async def one(i: int) -> None:
                gateway = first if i % 2 else second
                async with (
                    slots,
                    session.post(
                        gateway.make_url("/v1/chat/completions"),
                        json=body(i),
                        headers=bearer(key["key"]),
                    ) as r,
                ):
                    await r.read()
                    statuses.append(r.status)

            await asyncio.gather(*(one(i) for i in range(REQUESTS)))
            async with session.get(
                second.make_url(f"/admin/keys/{key['id']}"),
                headers=bearer("sk-master-acct-1"),
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
