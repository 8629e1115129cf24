"""GET /metrics: the Prometheus text exposition of every metric (docs/metrics.md).

No key: operators keep the route inside (DESIGN.md). With `--workers N` the answer merges
every worker's values, whichever worker the scrape lands on; reading their files happens
off the event loop.
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from gateway.server.state import STATE

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


async def metrics(request: web.Request) -> web.Response:
    registry = request.app[STATE].router.metrics.registry
    if registry.directory is None:
        body = registry.exposition()
    else:
        body = await asyncio.to_thread(registry.exposition)
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})
