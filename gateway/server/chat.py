"""POST /v1/chat/completions and GET /v1/models."""

from __future__ import annotations

from aiohttp import web

from gateway.errors import BadRequest
from gateway.server.auth import authorize
from gateway.server.inference import refuse_while_draining, serve_chat
from gateway.server.request_body import read_json_object, typed
from gateway.server.state import STATE
from gateway.wire.openai_chat import ChatRequest, encoder


async def chat_completions(request: web.Request) -> web.StreamResponse:
    authorize(request, request.app[STATE].config.auth.master_key)
    refuse_while_draining(request)
    body = await read_json_object(request)
    chat = typed(body, ChatRequest)
    if not chat.messages:
        raise BadRequest("'messages' must contain at least one message", param="messages")
    if isinstance(chat.n, int) and chat.n < 1:
        raise BadRequest("'n' must be at least 1", param="n")
    return await serve_chat(request, chat, body)


async def list_models(request: web.Request) -> web.Response:
    state = request.app[STATE]
    authorize(request, state.config.auth.master_key)
    return web.Response(
        body=encoder.encode(state.router.model_list()), content_type="application/json"
    )
