"""Serving one canonical chat request through a StreamActor: what every inbound API shares.

An inbound API (Chat Completions, Responses, Anthropic Messages) reads and checks its own
request, translates it to the canonical chat request, and hands it here with its `Outbound`.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.emulation.request import emulate_tools
from gateway.errors import GatewayError, NoUpstreamAvailable
from gateway.providers.base import NativeRequest
from gateway.server.state import REQUEST_ID, STATE
from gateway.stream.actor import StreamActor
from gateway.stream.outbound import Outbound
from gateway.wire.openai_chat import ChatRequest


def refuse_while_draining(request: web.Request) -> None:
    if request.app[STATE].draining:
        raise NoUpstreamAvailable("The gateway is shutting down", code="server_shutting_down")


async def serve_chat(
    request: web.Request,
    chat: ChatRequest,
    body: dict[str, Any],
    *,
    outbound: Outbound | None = None,
    native: NativeRequest | None = None,
) -> web.StreamResponse:
    """Plan the attempts for `chat.model` and run the actor; `body` is the canonical request
    as JSON (what an OpenAI-compatible upstream is sent), `outbound` the client's API (chat
    when None), `native` the client's own request for upstreams that speak its API."""
    state = request.app[STATE]
    plan = state.router.plan(chat.model)
    emulation = None
    if state.router.emulates_tools(chat.model):
        chat, body, emulation = emulate_tools(chat, body)
    request_id = request[REQUEST_ID]
    actor = StreamActor(
        http=request,
        pool=state.pool,
        tokens=state.tokens,
        server=state.config.server,
        deadline_s=state.config.routing.deadline_s,
        request=chat,
        body=body,
        plan=plan,
        request_id=request_id,
        headers={"x-request-id": request_id},
        outbound=outbound,
        native=native,
        tool_emulation=emulation,
    )
    state.enter(actor)
    try:
        return await actor.run()
    except GatewayError as err:
        if actor.attempts:
            err.headers["x-gateway-attempts"] = str(actor.attempts)
        raise
    finally:
        state.leave(actor)
