"""Requests other than chat streams: ended by a graceful shutdown that ran out of time, and
refused with a 503 when the store they need does not answer."""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from gateway.server.state import STATE
from gateway.store.kv import MemoryKV
from gateway.store.kv import StoreUnavailable
from tests.inprocess import inprocess_gateway
from tests.upstreams.embeddings_upstream import FakeEmbeddings


async def test_embeddings_request_is_ended_by_shutdown_with_a_503() -> None:
    fake = FakeEmbeddings().start()
    config = parse_config(
        f"""
store: {{url: "memory://"}}
providers:
  - {{name: oa, kind: openai, base_url: "{fake.base_url}/v1", keys: [{{key: k}}]}}
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        state = server.app[STATE]
        url = str(server.make_url("/v1/embeddings"))
        async with aiohttp.ClientSession() as session:
            call = asyncio.create_task(session.post(url, json={"model": "oa/slow", "input": "a"}))
            for _ in range(200):
                if state.active:
                    break
                await asyncio.sleep(0.01)
            assert len(state.active) == 1  # the embeddings request takes part in the drain
            for request in list(state.active):
                request.shut_down("the gateway is shutting down")
            async with await call as resp:
                body = await resp.json()
            assert resp.status == 503
            assert body["error"]["code"] == "server_shutting_down"
        assert not state.active
    finally:
        await server.close()
        fake.stop()


class DownKV(MemoryKV):
    async def get(self, key: str) -> bytes | None:
        raise StoreUnavailable("the store did not answer")


async def test_a_store_that_does_not_answer_is_a_503_with_retry_after() -> None:
    async with inprocess_gateway() as (server, _):
        server.app[STATE].kv = DownKV()
        url = str(server.make_url("/v1/responses"))
        body = {"model": "up/text", "input": "hi", "previous_response_id": "resp_x"}
        async with aiohttp.ClientSession() as session, session.post(url, json=body) as resp:
            answer = await resp.json()
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "1"
        assert answer["error"]["code"] == "store_unavailable"
        assert "did not answer" in answer["error"]["message"]


async def test_embeddings_failures_open_the_keys_circuit() -> None:
    """Embeddings attempts report to key health like chat: after `circuit_failures` failures
    in a row the key rests, and the next request is refused without reaching the upstream."""
    fake = FakeEmbeddings().start()
    config = parse_config(
        f"""
store: {{url: "memory://"}}
routing: {{circuit_failures: 2, circuit_open_s: 30, retries_per_target: 0}}
providers:
  - {{name: oa, kind: openai, base_url: "{fake.base_url}/v1", keys: [{{key: k}}]}}
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    try:
        url = str(server.make_url("/v1/embeddings"))
        async with aiohttp.ClientSession() as session:
            for _ in range(2):
                async with session.post(url, json={"model": "oa/fail-500", "input": "a"}) as r:
                    assert r.status == 502
            seen = len(fake.requests)
            async with session.post(url, json={"model": "oa/fail-500", "input": "a"}) as r:
                body = await r.json()
                assert r.status == 503
                assert int(r.headers["Retry-After"]) >= 1
            assert body["error"]["code"] == "no_upstream_available"
            assert len(fake.requests) == seen  # the resting key was not tried
    finally:
        await server.close()
        fake.stop()
