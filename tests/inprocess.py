"""A gateway Application served in the test's own event loop, in front of the fake OpenAI
upstream (provider `up`) and a `mock` provider: for tests that look inside the process
(tasks, blocking calls, garbage)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from tests.upstreams.openai_upstream import FakeOpenAI


@asynccontextmanager
async def inprocess_gateway(mock: str = "{}") -> AsyncIterator[tuple[TestServer, FakeOpenAI]]:
    fake = FakeOpenAI().start()
    config = parse_config(
        f"""
store: {{url: "memory://"}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k}}]}}
  - {{name: mock, kind: mock, mock: {mock}}}
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    try:
        yield server, fake
    finally:
        await server.close()
        fake.stop()
