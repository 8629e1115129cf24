"""A fake OpenAI upstream that answers the first request of each connection (keeping it
alive) and hangs up on any later one after reading it whole: it had the request, so a
client that sends it again double-bills the provider (issue: no invisible resends). Every
request body is recorded."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tests.upstreams.faulty_wire import openai_completion
from tests.upstreams.threaded import ThreadedUpstream


class HangupOnReuse(ThreadedUpstream):
    name = "hangup-on-reuse"
    base_path = "/v1"

    def __init__(self) -> None:
        super().__init__()
        self.bodies: list[dict[str, Any]] = []
        self._answered: set[int] = set()  # the connections (protocols) that had an answer

    def routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/chat/completions", self._chat)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        connection = id(request.protocol)
        if connection in self._answered:
            assert request.transport is not None
            request.transport.close()  # read whole, no byte of an answer
            return web.Response()
        self._answered.add(connection)
        return web.json_response(openai_completion(tools=False))
