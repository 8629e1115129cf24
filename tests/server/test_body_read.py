"""Reading the request body (gateway/server/request_body.py): whole when it came in one piece
or in many, kept for later readers, and refused past the size limit either way."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from gateway.server.request_body import body_bytes
from gateway.server.request_body import read_json_object

LIMIT = 1000


async def echo(request: web.Request) -> web.Response:
    try:
        body = await read_json_object(request)
    except web.HTTPRequestEntityTooLarge:
        return web.json_response({"too_large": True}, status=413)
    again = await read_json_object(request)
    raw = await body_bytes(request)
    return web.json_response({"body": body, "same": again == body, "bytes": len(raw)})


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    app = web.Application(client_max_size=LIMIT)
    app.router.add_post("/", echo)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()


async def post(server: TestServer, data: bytes | AsyncIterator[bytes]) -> tuple[int, dict]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(server.make_url("/"), data=data) as response,
    ):
        return response.status, await response.json()


async def test_a_body_in_one_piece(server: TestServer) -> None:
    raw = json.dumps({"model": "m", "text": "héllo"}).encode()
    status, answer = await post(server, raw)
    assert status == 200
    assert answer == {"body": {"model": "m", "text": "héllo"}, "same": True, "bytes": len(raw)}


async def test_a_body_in_pieces_with_pauses(server: TestServer) -> None:
    raw = json.dumps({"model": "m", "text": "x" * 300}).encode()

    async def pieces() -> AsyncIterator[bytes]:
        for start in range(0, len(raw), 100):
            yield raw[start : start + 100]
            await asyncio.sleep(0.01)

    status, answer = await post(server, pieces())
    assert status == 200
    assert answer["body"]["text"] == "x" * 300
    assert answer["bytes"] == len(raw)


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_limit_is_refused(server: TestServer, chunked: bool) -> None:
    raw = json.dumps({"text": "x" * LIMIT}).encode()

    async def pieces() -> AsyncIterator[bytes]:
        yield raw[:10]
        await asyncio.sleep(0.01)
        yield raw[10:]

    status, answer = await post(server, pieces() if chunked else raw)
    assert (status, answer) == (413, {"too_large": True})
