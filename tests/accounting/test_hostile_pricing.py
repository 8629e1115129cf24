"""The money path against a hostile tenant, in process (memory store, fake OpenAI upstream):
reused request ids, unpriced and directly addressed models, `n` choices, stored history and
other keys' stored responses. tests/security/test_hostile_tenant.py runs the same exploits
against real gateway processes on every store."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from tests.accounting.inprocess import INPUT
from tests.accounting.inprocess import MASTER
from tests.accounting.inprocess import OUTPUT
from tests.accounting.inprocess import accounting_gateway
from tests.accounting.inprocess import bearer
from tests.accounting.inprocess import config_text
from tests.accounting.inprocess import micro_cost
from tests.accounting.inprocess import new_key
from tests.upstreams.openai_upstream import FakeOpenAI

CHAT = "/v1/chat/completions"
NANOS_PER_MICRO = 1000


def chat(model: str = "priced", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **extra}


def reserve_nanos(body: bytes, output_tokens: int) -> int:
    """The reservation rule, by the test's own arithmetic: ceil(body bytes / 4) prompt
    tokens at the input price plus the output cap at the output price."""
    prompt = -(-len(body) // 4)
    return int((prompt * INPUT + output_tokens * OUTPUT) * NANOS_PER_MICRO)


async def key_view(s: aiohttp.ClientSession, server: TestServer, key_id: str) -> Any:
    async with s.get(server.make_url(f"/admin/keys/{key_id}"), headers=bearer(MASTER)) as r:
        assert r.status == 200
        return await r.json()


async def post(
    s: aiohttp.ClientSession, server: TestServer, path: str, body: bytes, key: str, **headers: str
) -> tuple[int, Any]:
    sent = {**bearer(key), "Content-Type": "application/json", **headers}
    async with s.post(server.make_url(path), data=body, headers=sent) as r:
        return r.status, await r.json()


async def test_a_reused_request_id_is_no_identity_in_the_rate_window() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        key = await new_key(s, server, rpm=2)
        statuses = []
        for _ in range(6):
            async with s.post(
                server.make_url(CHAT),
                json=chat(),
                headers={**bearer(key["key"]), "x-request-id": "same"},
            ) as r:
                statuses.append(r.status)
                assert r.headers["x-request-id"] == "same"  # still echoed
        assert statuses == [200, 200, 429, 429, 429, 429]


async def test_concurrent_requests_with_one_id_each_reserve() -> None:
    """Ten requests in flight at once with one x-request-id: each holds its own
    reservation, so the budget admits only as many as it covers."""
    body = json.dumps(chat("slow", max_tokens=100)).encode()
    one = reserve_nanos(body, 100)
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        budget = 3 * one + one // 2
        key = await new_key(s, server, budget_usd=budget / 1e9)
        answers = await asyncio.gather(
            *(
                post(s, server, CHAT, body, key["key"], **{"x-request-id": "same"})
                for _ in range(10)
            )
        )
        statuses = sorted(status for status, _ in answers)
        view = await key_view(s, server, key["id"])
    assert statuses.count(200) == 3, statuses
    assert statuses.count(429) == 7
    assert view["reserved_nanos"] == 0
    assert view["spend_nanos"] <= budget + one


async def test_a_metered_key_refuses_unpriced_models() -> None:
    async with accounting_gateway() as (server, upstream), aiohttp.ClientSession() as s:
        for limits in ({"budget_usd": 1}, {"tpm": 100000}):
            key = await new_key(s, server, **limits)
            before = len(upstream.requests)
            status, answer = await post(
                s, server, CHAT, json.dumps(chat("up/some-finetune-x")).encode(), key["key"]
            )
            assert status == 403, answer
            assert answer["error"]["code"] == "model_not_priced"
            assert answer["error"]["param"] == "model"
            assert len(upstream.requests) == before  # nothing went upstream
            view = await key_view(s, server, key["id"])
            assert (view["spend_nanos"], view["reserved_nanos"]) == (0, 0)
        async with s.get(server.make_url("/metrics")) as r:
            exposition = await r.text()
        assert 'gateway_rejections_total{reason="model_not_priced"} 2' in exposition
        free = await new_key(s, server, rpm=100)  # no money or token limit: may run it
        status, _ = await post(s, server, CHAT, json.dumps(chat("up/text")).encode(), free["key"])
        assert status == 200


async def test_a_static_metered_key_refuses_unpriced_models_before_the_store() -> None:
    upstream = FakeOpenAI().start()
    try:
        text = config_text(upstream.base_url, "memory://")
        text += "  - {name: open-budget, key: sk-static-open-1, budget_usd: 1}\n"
        server = TestServer(build_app(parse_config(text, env={})), host="127.0.0.1")
        await server.start_server()
        try:
            async with aiohttp.ClientSession() as s:
                status, answer = await post(
                    s, server, CHAT, json.dumps(chat("up/unknown-x")).encode(), "sk-static-open-1"
                )
                assert (status, answer["error"]["code"]) == (403, "model_not_priced")
                status, _ = await post(
                    s, server, CHAT, json.dumps(chat()).encode(), "sk-static-open-1"
                )
                assert status == 200
        finally:
            await server.close()
    finally:
        upstream.stop()


async def test_direct_addressing_of_a_configured_pair_pays_its_configured_price() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        key = await new_key(s, server, budget_usd=1)
        async with s.post(
            server.make_url(CHAT), json=chat("up/text"), headers=bearer(key["key"])
        ) as r:
            assert r.status == 200
            assert Decimal(r.headers["x-gateway-cost-usd"]) == micro_cost(11, 7)
        view = await key_view(s, server, key["id"])
        assert view["spend_nanos"] == int(micro_cost(11, 7) * 10**9)


async def test_n_choices_multiply_the_reservation() -> None:
    one_choice = json.dumps(chat(max_tokens=100)).encode()
    eight = json.dumps(chat(max_tokens=100, n=8)).encode()
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        # covers one choice's reservation twice over, not eight choices'
        key = await new_key(s, server, budget_usd=2 * reserve_nanos(eight, 100) / 1e9)
        status, answer = await post(s, server, CHAT, eight, key["key"])
        assert reserve_nanos(eight, 800) > 2 * reserve_nanos(eight, 100)
        assert (status, answer["error"]["code"]) == (429, "budget_exceeded")
        status, _ = await post(s, server, CHAT, one_choice, key["key"])
        assert status == 200
        view = await key_view(s, server, key["id"])
        assert view["reserved_nanos"] == 0


async def test_a_continued_response_reserves_its_stored_history() -> None:
    big = json.dumps({"model": "priced", "input": "x" * 20000, "max_output_tokens": 10}).encode()
    first_reserve = reserve_nanos(big, 10)
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        # the first turn fits, with a little to spare; continuing it carries its 20 KB again
        budget = first_reserve + 100_000
        key = await new_key(s, server, budget_usd=budget / 1e9)
        status, first = await post(s, server, "/v1/responses", big, key["key"])
        assert status == 200, first
        tiny = {"model": "priced", "input": "and?", "max_output_tokens": 10}
        status, answer = await post(
            s,
            server,
            "/v1/responses",
            json.dumps({**tiny, "previous_response_id": first["id"]}).encode(),
            key["key"],
        )
        assert (status, answer["error"]["code"]) == (429, "budget_exceeded")
        # the same small turn alone still fits: it was the history that did not
        status, _ = await post(s, server, "/v1/responses", json.dumps(tiny).encode(), key["key"])
        assert status == 200
        view = await key_view(s, server, key["id"])
        assert view["reserved_nanos"] == 0
        assert view["spend_nanos"] <= budget


async def test_a_stored_response_belongs_to_the_key_that_made_it() -> None:
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        owner, other = await new_key(s, server), await new_key(s, server)
        body = json.dumps({"model": "priced", "input": "remember 42"}).encode()
        status, first = await post(s, server, "/v1/responses", body, owner["key"])
        assert status == 200
        follow = json.dumps(
            {"model": "priced", "input": "what was it?", "previous_response_id": first["id"]}
        ).encode()
        unknown = json.dumps(
            {"model": "priced", "input": "?", "previous_response_id": "resp_" + "0" * 48}
        ).encode()
        _, not_found = await post(s, server, "/v1/responses", unknown, owner["key"])
        for stranger in (other["key"], MASTER):
            status, answer = await post(s, server, "/v1/responses", follow, stranger)
            assert status == 404
            assert answer["error"]["code"] == "previous_response_not_found"
            # the same answer as for an id that does not exist, apart from the id itself
            assert answer["error"]["message"].replace(first["id"], "ID") == not_found["error"][
                "message"
            ].replace("resp_" + "0" * 48, "ID")
        status, _ = await post(s, server, "/v1/responses", follow, owner["key"])
        assert status == 200


async def test_what_real_clients_see_of_the_refusals() -> None:
    """openai-python and anthropic-python raise their own typed errors, with the codes."""
    async with accounting_gateway() as (server, _), aiohttp.ClientSession() as s:
        owner = await new_key(s, server, budget_usd=1, rpm=100)
        other = await new_key(s, server, budget_usd=1)
        base = str(server.make_url("/v1"))
        mine = openai.AsyncOpenAI(base_url=base, api_key=owner["key"], max_retries=0)
        theirs = openai.AsyncOpenAI(base_url=base, api_key=other["key"], max_retries=0)
        claude = anthropic.AsyncAnthropic(
            base_url=str(server.make_url("")), api_key=owner["key"], max_retries=0
        )
        try:
            with pytest.raises(openai.PermissionDeniedError) as denied:
                await mine.chat.completions.create(
                    model="up/some-finetune-x", messages=[{"role": "user", "content": "hi"}]
                )
            assert denied.value.code == "model_not_priced"
            with pytest.raises(anthropic.PermissionDeniedError) as refused:
                await claude.messages.create(
                    model="up/some-finetune-x",
                    max_tokens=16,
                    messages=[{"role": "user", "content": "hi"}],
                )
            assert "no price" in refused.value.message
            first = await mine.responses.create(model="priced", input="remember 42")
            with pytest.raises(openai.NotFoundError) as missing:
                await theirs.responses.create(
                    model="priced", input="what was it?", previous_response_id=first.id
                )
            assert missing.value.code == "previous_response_not_found"
            follow = await mine.responses.create(
                model="priced", input="what was it?", previous_response_id=first.id
            )
            assert follow.status == "completed"
        finally:
            for client in (mine, theirs, claude):
                await client.close()
