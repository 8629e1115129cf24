"""A stored response is in the store before the client sees its end: a client that sends its
next turn the moment `response.completed` arrives finds `previous_response_id`."""

from __future__ import annotations

import asyncio
import json

import aiohttp

from gateway.server.state import STATE
from gateway.store.kv import MemoryKV
from tests.inprocess import inprocess_gateway


class SlowKV(MemoryKV):
    """Writes take a while, as a busy sqlite file or a distant redis may."""

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        await asyncio.sleep(0.3)
        await super().put(key, value, ttl_s)


async def test_stream_ends_only_after_the_response_is_stored() -> None:
    async with inprocess_gateway() as (server, _):
        kv = server.app[STATE].kv = SlowKV()
        url = str(server.make_url("/v1/responses"))
        body = {"model": "up/text", "input": "hi", "stream": True}
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
            assert resp.status == 200
            completed = None
            async for line in resp.content:
                if line.startswith(b"data: ") and b'"response.completed"' in line:
                    completed = json.loads(line[6:])
                    # this very moment: the response must already be there
                    assert await kv.get("resp:" + completed["response"]["id"]) is not None
            assert completed is not None


async def test_non_streaming_answer_leaves_after_the_response_is_stored() -> None:
    async with inprocess_gateway() as (server, _):
        kv = server.app[STATE].kv = SlowKV()
        url = str(server.make_url("/v1/responses"))
        async with aiohttp.ClientSession() as session:
            async with session.post(url, json={"model": "up/text", "input": "hi"}) as resp:
                answer = await resp.json()
            assert await kv.get("resp:" + answer["id"]) is not None
            follow = {"model": "up/text", "input": "more", "previous_response_id": answer["id"]}
            async with session.post(url, json=follow) as resp:
                assert resp.status == 200
