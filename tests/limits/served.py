"""An in-process gateway served the way `gateway serve` serves it (GatewayRunner, header
limits, uvloop not required), for the limit tests: `served_gateway(yaml)` yields its base
URL and Application; `served_with_session(yaml)` that and a client session without a
connection cap; `fill_until_refused(slots, principal, n)` the process-cap check."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from gateway.accounting.service import Principal
from gateway.app import build_app
from gateway.config import Config
from gateway.config import parse_config
from gateway.server.limits import StreamSlots
from gateway.server.limits import TooManyStreams
from gateway.server.runner import bind_socket
from gateway.server.runner import start_site

MOCK_PROVIDER = "{name: mock, kind: mock, mock: {chunks: 4}}"


@dataclass
class Served:
    url: str
    app: web.Application
    config: Config


@asynccontextmanager
async def served_gateway(config_yaml: str) -> AsyncIterator[Served]:
    config = parse_config(config_yaml, env={})
    sock = bind_socket("127.0.0.1", 0, reuse_port=False)
    sock.listen(512)
    app = build_app(config)
    runner, _ = await start_site(app, config, sock)
    try:
        yield Served(f"http://127.0.0.1:{sock.getsockname()[1]}", app, config)
    finally:
        await runner.cleanup()
        sock.close()


@asynccontextmanager
async def served_with_session(
    config_yaml: str,
) -> AsyncIterator[tuple[Served, aiohttp.ClientSession]]:
    connector = aiohttp.TCPConnector(limit=0)  # the test decides how many are in flight
    async with (
        served_gateway(config_yaml) as served,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        yield served, session


def fill_until_refused(slots: StreamSlots, principal: Principal, count: int) -> None:
    """`count` requests of `principal` (a virtual key) are taken, all counted under its key,
    the next one is refused with 503 and
    Retry-After, and once every slot is given back the slots hold nothing."""
    held = [slots.take(principal) for _ in range(count)]
    assert slots.by_key == {principal.secret_hash: count}  # all of them under the one key
    with pytest.raises(TooManyStreams) as refused:
        slots.take(principal)
    assert refused.value.status == 503
    assert refused.value.headers["Retry-After"] == "1"
    for key in held:
        slots.give_back(key)
    assert slots.total == 0
    assert slots.by_key == {}
