"""Accounting through the HTTP server (in process, fake OpenAI upstream, memory store):
costs on answers, virtual keys, limits, the admin API."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from tests.accounting.inprocess import MASTER
from tests.accounting.inprocess import STATIC
from tests.accounting.inprocess import accounting_gateway
from tests.accounting.inprocess import bearer
from tests.accounting.inprocess import micro_cost
from tests.accounting.inprocess import new_key

CHAT = "/v1/chat/completions"


def chat(model: str = "priced", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


async def sse_events(response: aiohttp.ClientResponse) -> list[Any]:
    return [
        json.loads(line[6:])
        async for line in response.content
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]"
    ]


async def admin_get(session: aiohttp.ClientSession, server: TestServer, path: str) -> Any:
    async with session.get(server.make_url(path), headers=bearer(MASTER)) as r:
        assert r.status == 200, await r.text()
        return await r.json()


async def test_non_streaming_answer_carries_its_cost() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        async with s.post(server.make_url(CHAT), json=chat(), headers=bearer(MASTER)) as r:
            assert r.status == 200
            usage = (await r.json())["usage"]
            cost = r.headers["x-gateway-cost-usd"]
        assert (usage["prompt_tokens"], usage["completion_tokens"]) == (11, 7)
        assert Decimal(cost) == micro_cost(11, 7)
        spend = await admin_get(s, server, "/admin/spend")
        assert spend["models"][0]["model"] == "up/text"
        assert Decimal(str(spend["total_usd"])) == micro_cost(11, 7)
        assert spend["keys"][0]["key_id"] is None  # the master key


async def test_usage_chunk_carries_the_cost() -> None:
    body = chat(stream=True, stream_options={"include_usage": True})
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        async with s.post(server.make_url(CHAT), json=body, headers=bearer(MASTER)) as r:
            assert "x-gateway-cost-usd" not in r.headers  # headers left before the cost was known
            events = await sse_events(r)
        usage = events[-1]["usage"]
        cached = usage["prompt_tokens_details"]["cached_tokens"]
        expected = micro_cost(usage["prompt_tokens"], usage["completion_tokens"], cached)
        assert cached == 3
        assert Decimal(str(usage["cost_usd"])) == expected
        spend = await admin_get(s, server, "/admin/spend")
        assert spend["total_nanos"] == int(expected * 10**9)


async def test_stream_without_usage_asked_has_no_cost_field_but_is_charged() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        body = chat(stream=True)
        async with s.post(server.make_url(CHAT), json=body, headers=bearer(MASTER)) as r:
            events = await sse_events(r)
        assert events
        assert all(e.get("usage") is None for e in events)
        spend = await admin_get(s, server, "/admin/spend")
        assert spend["models"][0]["estimated_requests"] == 0
        assert spend["total_nanos"] == int(micro_cost(11, 7, 3) * 10**9)


async def test_virtual_key_lifecycle_and_admin_guard() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        created = await new_key(s, server, models=["priced"], metadata={"team": "a"})
        secret, key_id = created["key"], created["id"]
        assert secret.startswith("sk-gw-")
        assert created["metadata"] == {"team": "a"}
        async with s.post(server.make_url(CHAT), json=chat(), headers=bearer(secret)) as r:
            assert r.status == 200
        async with s.post(server.make_url(CHAT), json=chat("other"), headers=bearer(secret)) as r:
            assert r.status == 403
            assert (await r.json())["error"]["param"] == "model"
        for path in ("/admin/keys", "/admin/spend", f"/admin/keys/{key_id}"):
            async with s.get(server.make_url(path), headers=bearer(secret)) as r:
                assert r.status == 403
            async with s.get(server.make_url(path), headers=bearer("sk-nobody")) as r:
                assert r.status == 401
            async with s.get(server.make_url(path)) as r:
                assert r.status == 401
        async with s.post(
            server.make_url("/admin/keys"), json={"name": "x"}, headers=bearer(secret)
        ) as r:
            assert r.status == 403
        one = await admin_get(s, server, f"/admin/keys/{key_id}")
        assert Decimal(str(one["spend_usd"])) == micro_cost(11, 7)
        listed = await admin_get(s, server, "/admin/keys")
        text = str(listed) + str(one)
        assert secret not in text
        assert "secret_hash" not in text
        assert {k["id"] for k in listed["data"]} == {"cfg-ci", key_id}
        async with s.get(server.make_url("/v1/models"), headers=bearer(secret)) as r:
            assert [m["id"] for m in (await r.json())["data"]] == ["priced"]
        async with s.delete(server.make_url("/admin/keys/cfg-ci"), headers=bearer(MASTER)) as r:
            assert r.status == 409
        async with s.delete(server.make_url(f"/admin/keys/{key_id}"), headers=bearer(MASTER)) as r:
            assert r.status == 200
        async with s.post(server.make_url(CHAT), json=chat(), headers=bearer(secret)) as r:
            assert r.status == 401
            assert (await r.json())["error"]["code"] == "key_revoked"
        async with s.delete(server.make_url("/admin/keys/key_nope"), headers=bearer(MASTER)) as r:
            assert r.status == 404


async def test_bad_admin_input_names_the_field() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        for body, param in [
            ({}, "name"),
            ({"name": "x", "rpm": 0}, "rpm"),
            ({"name": "x", "budget_usd": "lots"}, "budget_usd"),
            ({"name": "x", "expires_at": "soon"}, "expires_at"),
            ({"name": "x", "budget_period": "hourly"}, "budget_period"),
        ]:
            async with s.post(
                server.make_url("/admin/keys"), json=body, headers=bearer(MASTER)
            ) as r:
                assert r.status == 400, body
                assert (await r.json())["error"]["param"] == param


async def test_expired_key_is_refused() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        created = await new_key(s, server, expires_at="2020-01-01T00:00:00Z")
        async with s.post(server.make_url(CHAT), json=chat(), headers=bearer(created["key"])) as r:
            assert r.status == 401
            assert (await r.json())["error"]["code"] == "key_expired"


async def test_admin_api_is_closed_without_a_master_key() -> None:
    async with accounting_gateway(master=None) as (server, _), aiohttp.ClientSession() as s:
        async with s.get(server.make_url("/admin/keys")) as r:
            assert r.status == 403
            assert (await r.json())["error"]["code"] == "admin_disabled"
        # an open gateway still serves (and costs) anonymous requests and unknown tokens
        async with s.post(server.make_url(CHAT), json=chat(), headers=bearer("whatever")) as r:
            assert r.status == 200
            assert Decimal(r.headers["x-gateway-cost-usd"]) == micro_cost(11, 7)
        # a static key is still held to its limits on an open gateway (rpm 2)
        statuses = []
        for _ in range(3):
            async with s.post(server.make_url(CHAT), json=chat(), headers=bearer(STATIC)) as r:
                statuses.append(r.status)
        assert statuses == [200, 200, 429]


async def test_rpm_answers_429_with_retry_after() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        answers = []
        for _ in range(3):
            async with s.post(server.make_url(CHAT), json=chat(), headers=bearer(STATIC)) as r:
                answers.append((r.status, r.headers.get("Retry-After"), await r.json()))
        assert [a[0] for a in answers] == [200, 200, 429]
        assert answers[2][2]["error"]["code"] == "rate_limit_exceeded"
        assert 1 <= int(answers[2][1]) <= 60


async def test_budget_is_refused_with_budget_exceeded_in_each_shape() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        # each request reserves about 25 prompt tokens * 2 + 10 * 8 = 130 microdollars
        key = (await new_key(s, server, budget_usd=0.0003))["key"]
        statuses = []
        for _ in range(6):
            async with s.post(
                server.make_url(CHAT), json=chat(max_tokens=10), headers=bearer(key)
            ) as r:
                statuses.append(r.status)
                last = await r.json()
        assert statuses[:3] == [200, 200, 200]
        assert statuses[-1] == 429
        assert last["error"]["code"] == "budget_exceeded"
        assert last["error"]["type"] == "rate_limit_error"
        body = {
            "model": "priced",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
        }
        async with s.post(
            server.make_url("/v1/messages"), json=body, headers={"x-api-key": key}
        ) as r:
            assert r.status == 429
            answer = await r.json()
        assert answer["type"] == "error"
        assert answer["error"]["type"] == "rate_limit_error"
        listed = await admin_get(s, server, "/admin/keys")
        mine = next(k for k in listed["data"] if k["name"] == "t")
        assert mine["spend_nanos"] <= 300_000


async def test_a_stream_cut_off_by_the_client_is_charged_an_estimate() -> None:
    body = chat("slow", stream=True, max_tokens=1000)
    async with accounting_gateway() as (server, fake), aiohttp.ClientSession() as s:
        key = await new_key(s, server, budget_usd=1)
        async with s.post(server.make_url(CHAT), json=body, headers=bearer(key["key"])) as r:
            got = 0
            async for line in r.content:
                got += line.startswith(b"data: ")
                if got >= 5:
                    break
        await asyncio.to_thread(fake.disconnected.wait, 5)
        for _ in range(100):
            spend = await admin_get(s, server, f"/admin/keys/{key['id']}")
            if spend["spend_nanos"]:
                break
            await asyncio.sleep(0.02)
        assert spend["reserved_nanos"] == 0
        report = await admin_get(s, server, "/admin/spend")
        row = next(k for k in report["keys"] if k["key_id"] == key["id"])
        assert row["estimated_requests"] == 1
        assert row["output_tokens"] >= 1
        assert spend["spend_nanos"] == row["spend_nanos"] > 0


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/responses"])
async def test_failed_request_releases_its_reservation(path: str) -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        key = await new_key(s, server, budget_usd=1)
        body: dict[str, Any] = {"model": "failing"}  # priced: its reservation is not 0
        body |= (
            {"messages": [{"role": "user", "content": "hi"}]} if "chat" in path else {"input": "hi"}
        )
        async with s.post(server.make_url(path), json=body, headers=bearer(key["key"])) as r:
            assert r.status == 400
        one = await admin_get(s, server, f"/admin/keys/{key['id']}")
        assert (one["reserved_nanos"], one["spend_nanos"]) == (0, 0)


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/responses", {"model": "priced", "input": "hi"}),
        (
            "/v1/messages",
            {"model": "priced", "max_tokens": 50, "messages": [{"role": "user", "content": "hi"}]},
        ),
    ],
)
async def test_other_inbound_apis_carry_the_cost_header(path: str, body: dict[str, Any]) -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        async with s.post(server.make_url(path), json=body, headers=bearer(MASTER)) as r:
            assert r.status == 200, await r.text()
            cost = Decimal(r.headers["x-gateway-cost-usd"])
        assert cost == micro_cost(11, 7)
        spend = await admin_get(s, server, "/admin/spend")
        assert spend["total_nanos"] == int(cost * 10**9)
