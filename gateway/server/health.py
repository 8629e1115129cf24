"""GET /healthz (the process answers) and GET /readyz (it should get traffic).

Readiness asks the store for a ping on every probe: a gateway whose store does not answer
would have to refuse (fail closed) whatever needs the store, so it should get no traffic.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.server.state import STATE
from gateway.store.kv import KeyValueStore

# A store that hangs makes the probe answer 503 after this long, rather than hang with it.
STORE_PING_TIMEOUT_S = 2.0


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining:
        return web.json_response({"status": "draining"}, status=503)
    if not await _store_answers(state.kv):
        return web.json_response(
            {"status": "unavailable", "reason": "the store does not answer ping"}, status=503
        )
    return web.json_response({"status": "ready", "providers": len(state.config.providers)})


async def _store_answers(kv: KeyValueStore) -> bool:
    try:
        async with asyncio.timeout(STORE_PING_TIMEOUT_S):
            return await kv.ping()
    except TimeoutError:
        return False
