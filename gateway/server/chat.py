"""POST /v1/chat/completions and GET /v1/models."""

from __future__ import annotations

from aiohttp import web

from gateway.emulation.request import emulate_tools
from gateway.errors import BadRequest, GatewayError, NoUpstreamAvailable
from gateway.server.auth import authorize
from gateway.server.request_body import read_json_object, typed
from gateway.server.state import REQUEST_ID, STATE
from gateway.stream.actor import StreamActor
from gateway.wire.openai_chat import ChatRequest, encoder


async def chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE]
    authorize(request, state.config.auth.master_key)
    if state.draining:
        raise NoUpstreamAvailable("The gateway is shutting down", code="server_shutting_down")
    body = await read_json_object(request)
    chat = typed(body, ChatRequest)
    if not chat.messages:
        raise BadRequest("'messages' must contain at least one message", param="messages")
    if isinstance(chat.n, int) and chat.n < 1:
        raise BadRequest("'n' must be at least 1", param="n")
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
        tool_emulation=emulation,
        request_id=request_id,
        headers={"x-request-id": request_id},
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


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    authorize(request, state.config.auth.master_key)
    return web.Response(
        body=encoder.encode(state.router.model_list()), content_type="application/json"
    )
