"""GET /healthz (the process answers) and GET /readyz (it should get traffic)."""

from __future__ import annotations

from aiohttp import web

from gateway.server.state import STATE


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def readyz(request: web.Request) -> web.Response:
    state = request.app[STATE]
    if state.draining:
        return web.json_response({"status": "draining"}, status=503)
    return web.json_response({"status": "ready", "providers": len(state.config.providers)})
