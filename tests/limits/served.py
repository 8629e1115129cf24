"""An in-process gateway served the way `gateway serve` serves it (GatewayRunner, header
limits, uvloop not required), for the limit tests: `served_gateway(yaml)` yields its base
URL and Application."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web

from gateway.app import build_app
from gateway.config import Config
from gateway.config import parse_config
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
