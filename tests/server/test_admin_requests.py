"""GET /admin/requests and /admin/requests/{id} on an in-process gateway whose request log is
a real sqlite file: real requests found by key, model, status (code and class), the client's
x-request-id and time; cursor paging loses and repeats nothing; one request's every attempt;
a virtual key and a wrong key refused; bad parameters named; the admin calls not logged;
404 saying how to turn the log on when it is off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = {"authorization": "Bearer mk-test"}
TEAM_KEY = "sk-gw-team-0123456789abcdef"
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[TestServer]:
    fake = FakeOpenAI().start()
    config = parse_config(
        f"""
store: {{url: "sqlite:///{tmp_path / "gw.db"}"}}
auth: {{master_key: mk-test}}
request_log: {{flush_s: 0.05}}
providers:
  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k1}}]}}
  - {{name: down, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k2}}]}}
models:
  - name: flaky
    targets:
      - {{provider: down, model: fail-500, priority: 0}}
      - {{provider: up, model: text, priority: 1}}
keys: [{{name: team, key: {TEAM_KEY}}}]
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()
        fake.stop()


async def get(server: TestServer, path: str, headers: dict[str, str] = MASTER) -> Any:
    async with (
        aiohttp.ClientSession() as session,
        session.get(server.make_url(path), headers=headers) as answer,
    ):
        return answer.status, await answer.json()


async def chat(server: TestServer, model: str, key: str, request_id: str) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": model, "messages": HI},
            headers={"authorization": f"Bearer {key}", "x-request-id": request_id},
        ) as answer,
    ):
        await answer.read()
        return answer.status


async def logged(server: TestServer, n: int) -> list[dict[str, Any]]:
    for _ in range(100):
        status, body = await get(server, "/admin/requests?limit=1000")
        assert status == 200
        if len(body["data"]) >= n:
            return list(body["data"])
        await asyncio.sleep(0.05)
    raise AssertionError(f"{n} records awaited")


async def test_requests_are_found_by_every_filter_and_paged(gateway: TestServer) -> None:
    started = time.time()
    assert await chat(gateway, "flaky", "mk-test", "rid-flaky") == 200
    for n in range(5):
        assert await chat(gateway, "up/text", TEAM_KEY, f"rid-team-{n}") == 200
    assert await chat(gateway, "up/fail-429", TEAM_KEY, "rid-limited") == 429
    records = await logged(gateway, 7)
    assert len(records) == 7  # the admin calls themselves left none
    assert records[0]["client_request_id"] == "rid-limited"  # newest first
    assert records[-1]["client_request_id"] == "rid-flaky"

    async def ids(query: str) -> list[str]:
        status, body = await get(gateway, "/admin/requests?" + query)
        assert status == 200, body
        return [r["client_request_id"] for r in body["data"]]

    assert await ids("key=team") == ["rid-limited"] + [f"rid-team-{n}" for n in range(4, -1, -1)]
    assert await ids("model=flaky") == ["rid-flaky"]
    assert await ids("status=429") == ["rid-limited"]
    assert await ids("status=4xx") == ["rid-limited"]
    assert await ids("request_id=rid-team-2") == ["rid-team-2"]
    assert await ids(f"until={started}") == []
    assert len(await ids(f"since={started}")) == 7
    assert len(await ids("since=2000-01-01T00:00:00Z")) == 7
    # three pages of three: every record once
    seen: list[str] = []
    query = "limit=3"
    for _ in range(5):
        status, body = await get(gateway, "/admin/requests?" + query)
        seen += [r["id"] for r in body["data"]]
        if body["next_cursor"] is None:
            break
        query = "limit=3&cursor=" + body["next_cursor"]
    assert seen == [r["id"] for r in records]
    # one request, by the client's id or the gateway's, with every attempt
    status, one = await get(gateway, "/admin/requests/rid-flaky")
    assert status == 200
    assert [(a["provider"], a["status"], a.get("error")) for a in one["attempts"]] == [
        ("down", 500, "http_5xx"),
        ("down", 500, "http_5xx"),  # routing.retries_per_target (default 1)
        ("up", 200, None),
    ]
    assert one["time"].endswith("Z")
    status, same = await get(gateway, f"/admin/requests/{one['id']}")
    assert same == one


async def test_only_the_master_key_and_good_parameters(gateway: TestServer) -> None:
    for headers in ({"authorization": f"Bearer {TEAM_KEY}"}, {"authorization": "Bearer nope"}):
        status, body = await get(gateway, "/admin/requests", headers)
        assert status in (401, 403), body
    for query, param in (
        ("limit=1001", "limit"),
        ("limit=0", "limit"),
        ("status=6xx", "status"),
        ("since=yesterday", "since"),
        ("until=2026-01-01T00:00:00", "until"),
        ("cursor=garbage", "cursor"),
    ):
        status, body = await get(gateway, "/admin/requests?" + query)
        assert status == 400, query
        assert body["error"]["param"] == param
    status, body = await get(gateway, "/admin/requests/no-such-id")
    assert status == 404
    assert body["error"]["code"] == "request_not_found"


async def test_without_a_request_log_the_routes_say_how_to_turn_it_on() -> None:
    config = parse_config(
        'store: {url: "memory://"}\nauth: {master_key: mk-test}\n'
        "providers: [{name: mock, kind: mock}]\n",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        status, body = await get(server, "/admin/requests")
        assert status == 404
        assert "request_log" in body["error"]["message"]
    finally:
        await server.close()
