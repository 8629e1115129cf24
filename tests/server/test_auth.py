"""The master key: required on /v1 routes when set, never on health routes."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config

BODY = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    config = parse_config(
        """
auth: {master_key: "${MASTER}"}
store: {url: "memory://"}
providers: [{name: mock, kind: mock}]
models: [{name: mock, targets: [{provider: mock, model: mock}]}]
""",
        env={"MASTER": "sk-master-123"},
    )
    test_server = TestServer(build_app(config), host="127.0.0.1")
    await test_server.start_server()
    try:
        yield test_server
    finally:
        await test_server.close()


@pytest.mark.parametrize(
    ("headers", "status", "code"),
    [
        ({}, 401, "missing_api_key"),
        ({"Authorization": "Bearer wrong"}, 401, "invalid_api_key"),
        ({"Authorization": "Basic sk-master-123"}, 401, "missing_api_key"),
        ({"Authorization": "Bearer sk-master-123"}, 200, None),
    ],
)
async def test_master_key(
    server: TestServer, headers: dict[str, str], status: int, code: str | None
) -> None:
    async with aiohttp.ClientSession(headers=headers) as session:
        for method, path, body in [
            ("POST", "/v1/chat/completions", BODY),
            ("GET", "/v1/models", None),
        ]:
            async with session.request(method, server.make_url(path), json=body) as response:
                assert response.status == status
                data = await response.json()
                if code is not None:
                    assert data["error"]["code"] == code
                    assert "sk-master-123" not in await response.text()
        for path in ("/healthz", "/readyz"):
            async with session.get(server.make_url(path)) as response:
                assert response.status == 200
