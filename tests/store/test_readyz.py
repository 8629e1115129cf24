"""The gateway and its store: /readyz follows the store's ping, a redis that is down at
startup does not stop the gateway, the default sqlite store never blocks the event loop, and
a sqlite path in a missing directory stops `gateway serve` with one clear line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from blockbuster import blockbuster_ctx

from gateway.app import build_app
from gateway.cli import main
from gateway.config import parse_config
from gateway.server.state import STATE
from gateway.store.kv import StoreMisconfigured
from gateway.store.sqlite_kv import SqliteKV
from tests.redis_server import RedisServer
from tests.redis_server import free_port


def config_with_store(url: str) -> str:
    return f"""
store: {{url: "{url}"}}
providers:
  - {{name: mock, kind: mock, mock: {{chunks: 3}}}}
models:
  - {{name: mock, targets: [{{provider: mock, model: mock}}]}}
"""


@asynccontextmanager
async def gateway(store_url: str) -> AsyncIterator[TestServer]:
    app = build_app(parse_config(config_with_store(store_url), env={}))
    server = TestServer(app, host="127.0.0.1", handler_cancellation=True)
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


async def readyz(session: aiohttp.ClientSession, server: TestServer) -> tuple[int, object]:
    async with session.get(server.make_url("/readyz")) as response:
        return response.status, await response.json()


async def test_readyz_follows_the_redis_server(redis_server: RedisServer) -> None:
    async with gateway(redis_server.url()) as server, aiohttp.ClientSession() as session:
        assert await readyz(session, server) == (200, {"status": "ready", "providers": 1})
        redis_server.stop()
        assert await readyz(session, server) == (
            503,
            {"status": "unavailable", "reason": "the store does not answer ping"},
        )
        redis_server.start()
        assert (await readyz(session, server))[0] == 200


async def test_redis_down_at_startup_does_not_stop_the_gateway() -> None:
    async with (
        gateway(f"redis://127.0.0.1:{free_port()}/0") as server,
        aiohttp.ClientSession() as session,
    ):
        assert (await readyz(session, server))[0] == 503
        async with session.get(server.make_url("/healthz")) as response:
            assert response.status == 200
        body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
        async with session.post(server.make_url("/v1/chat/completions"), json=body) as response:
            assert response.status == 200  # chat needs no store yet


async def test_draining_wins_over_a_ready_store(tmp_path: Path) -> None:
    async with gateway(f"sqlite:///{tmp_path}/gw.db") as server, aiohttp.ClientSession() as session:
        assert (await readyz(session, server))[0] == 200
        server.app[STATE].draining = True
        assert await readyz(session, server) == (503, {"status": "draining"})


async def test_default_sqlite_store_never_blocks_the_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    app_config = parse_config(config_with_store("sqlite:///./gateway.db"), env={})
    assert app_config.store.url == "sqlite:///./gateway.db"  # the built-in default's form
    async with gateway(app_config.store.url) as server, aiohttp.ClientSession() as session:
        kv = server.app[STATE].kv
        assert isinstance(kv, SqliteKV)
        with blockbuster_ctx(scanned_modules=["gateway"]):
            assert (await readyz(session, server))[0] == 200  # opens the file, makes the table
            await kv.put("resp_1", b"stored", 60)
            assert await kv.get("resp_1") == b"stored"
            body = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
            body["stream"] = True
            async with session.post(server.make_url("/v1/chat/completions"), json=body) as resp:
                await resp.read()
                assert resp.status == 200
    assert (tmp_path / "gateway.db").exists()


def test_sqlite_in_a_missing_directory_refuses_to_start(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nope"
    path = tmp_path / "gw.yaml"
    path.write_text(config_with_store(f"sqlite:///{missing}/gw.db"))
    with pytest.raises(StoreMisconfigured, match="does not exist"):
        build_app(parse_config(path.read_text(), env={}))
    assert main(["serve", "--config", str(path), "--port", "0"]) == 2
    assert capsys.readouterr().err == (
        f"store.url: the directory of the sqlite database does not exist: {missing}\n"
    )
