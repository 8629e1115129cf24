"""POST /v1/chat/completions and GET /v1/models."""

from __future__ import annotations

from aiohttp import web

from gateway.accounting.service import ACCOUNTING
from gateway.errors import BadRequest
from gateway.server.auth import authenticate
from gateway.server.inference import refuse_while_draining
from gateway.server.inference import serve_chat
from gateway.server.request_body import read_json_object
from gateway.server.request_body import typed
from gateway.server.state import STATE
from gateway.wire.openai_chat import ChatRequest
from gateway.wire.openai_chat import encoder


async def chat_completions(request: web.Request) -> web.StreamResponse:
    authenticate(request)
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
    key = await request.app[ACCOUNTING].key_of(authenticate(request))
    models = state.router.model_list()
    if key is not None and key.models is not None:
        allowed = set(key.models)  # a virtual key sees the models it may use
        models.data = [card for card in models.data if card.id in allowed]
    return web.Response(body=encoder.encode(models), content_type="application/json")
