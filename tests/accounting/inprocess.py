"""A gateway Application with accounting, served in the test's own loop, in front of the
fake OpenAI upstream: provider `up`, priced models, a master key and a static key."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from decimal import Decimal

import aiohttp
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = "sk-master-acct-1"
STATIC = "sk-static-ci-secret-1"
# USD per million tokens == microdollars per token
INPUT, CACHED, OUTPUT = Decimal("2"), Decimal("0.5"), Decimal("8")


def micro_cost(prompt: int, completion: int, cached: int = 0) -> Decimal:
    """The cost the price arithmetic gives, in USD (the test's own arithmetic)."""
    micro = (prompt - cached) * INPUT + cached * CACHED + completion * OUTPUT
    return micro / Decimal(10**6)


def config_text(base_url: str, store: str, master: str | None = MASTER) -> str:
    price = "{input_per_mtok: 2.0, output_per_mtok: 8.0, cached_input_per_mtok: 0.5}"
    auth = f"auth: {{master_key: {master}}}\n" if master else ""
    return f"""
{auth}store: {{url: "{store}"}}
providers:
  - {{name: up, kind: openai, base_url: "{base_url}", keys: [{{key: k}}]}}
  - {{name: mock, kind: mock}}
models:
  - {{name: priced, targets: [{{provider: up, model: text}}], price: {price}}}
  - {{name: slow, targets: [{{provider: up, model: slow}}], price: {price}}}
  - {{name: other, targets: [{{provider: up, model: text}}], price: {price}}}
  - {{name: failing, targets: [{{provider: up, model: fail-400}}], price: {price}}}
keys:
  - {{name: ci, key: {STATIC}, budget_usd: 1, rpm: 2, models: [priced]}}
"""


@asynccontextmanager
async def accounting_gateway(
    store: str = "memory://", master: str | None = MASTER, fake: FakeOpenAI | None = None
) -> AsyncIterator[tuple[TestServer, FakeOpenAI]]:
    own = fake is None
    upstream = FakeOpenAI().start() if fake is None else fake
    config = parse_config(config_text(upstream.base_url, store, master), env={})
    server = TestServer(build_app(config), host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    try:
        yield server, upstream
    finally:
        await server.close()
        if own:
            upstream.stop()


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def new_key(session: aiohttp.ClientSession, server: TestServer, **spec: object) -> dict:  # type: ignore[type-arg]
    async with session.post(
        server.make_url("/admin/keys"), json={"name": "t", **spec}, headers=bearer(MASTER)
    ) as r:
        assert r.status == 201, await r.text()
        created: dict = await r.json()  # type: ignore[type-arg]
        return created
