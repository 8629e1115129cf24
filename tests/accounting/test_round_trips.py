"""The hot path's store calls: one before the upstream request (`admit`) and one after the
answer (`settle`) for a virtual key, one (`settle`) for the master key, none other; and
what those calls cost on the memory and sqlite stores (printed, for the record)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gateway.accounting.keys import budget_windows
from gateway.accounting.service import ACCOUNTING
from gateway.store.ledger import Admission
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import Ledger
from gateway.store.ledger import make_ledger
from tests.accounting.inprocess import MASTER
from tests.accounting.inprocess import STATIC
from tests.accounting.inprocess import accounting_gateway
from tests.accounting.inprocess import bearer

BODIES: list[dict[str, Any]] = [
    {"model": "priced", "messages": [{"role": "user", "content": "hi"}]},
    {"model": "priced", "messages": [{"role": "user", "content": "hi"}], "stream": True},
]


class CountingLedger:
    """Every call to the wrapped ledger, by name."""

    def __init__(self, inner: Ledger) -> None:
        self.inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return await method(*args, **kwargs)

        return counted


@pytest.mark.parametrize("body", BODIES, ids=["unary", "stream"])
async def test_one_store_call_before_and_one_after(body: dict[str, Any]) -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        accounting = server.app[ACCOUNTING]
        counting = CountingLedger(accounting.ledger)
        accounting.ledger = counting  # type: ignore[assignment]
        for key, expected in [(STATIC, ["admit", "settle"]), (MASTER, ["settle"])]:
            counting.calls.clear()
            async with s.post(
                server.make_url("/v1/chat/completions"), json=body, headers=bearer(key)
            ) as r:
                assert r.status == 200
                await r.read()
            assert counting.calls == expected


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_cost_of_the_two_calls(store: str, tmp_path: Path) -> None:
    ledger = make_ledger("memory://" if store == "memory" else f"sqlite:///{tmp_path}/b.db")
    record = KeyRecord(id="k", name="k", secret_hash="h", budget_nanos=10**15, rpm=10**6)
    await ledger.create_key(record)
    rounds = 300
    try:
        started = time.perf_counter()
        for i in range(rounds):
            now = time.time()
            admitted = await ledger.admit(
                Admission(
                    ticket=f"t{i}",
                    now=now,
                    model="m",
                    reserve_nanos=1000,
                    tokens=10,
                    hold_s=660,
                    windows=budget_windows(now),
                    secret_hash="h",
                )
            )
            assert admitted.verdict == "ok"
            await ledger.settle(
                Charge(
                    key_id="k",
                    model="up/m",
                    cost_nanos=700,
                    input_tokens=10,
                    output_tokens=5,
                    estimated=False,
                    now=now,
                    ticket=f"t{i}",
                    window=admitted.window,
                    reserved_nanos=admitted.reserved_nanos,
                )
            )
        per_request_us = (time.perf_counter() - started) / rounds * 1e6
        spend = await ledger.key_spend("k", "total", time.time())
    finally:
        await ledger.close()
    assert spend.total_nanos == 700 * rounds
    print(f"ledger {store}: admit+settle {per_request_us:.0f} us per request ({rounds} rounds)")
