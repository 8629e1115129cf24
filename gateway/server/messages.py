"""POST /v1/messages: the Anthropic Messages API in front of any provider (its
count_tokens route is server/count_tokens.py).

A Messages request is translated to the canonical chat request (inbound/messages_request.py)
and served by `serve_chat` like any other, with `MessagesOutbound` rendering the answer as
Anthropic events; failover, the commit point, keep-alives and tool emulation all come from
there. Errors on these routes leave in Anthropic's shape (`render_error`, registered under
`ERROR_SHAPES` by the app).

The client's own request (its JSON body and `anthropic-beta` header) rides along as a
`NativeRequest`: an attempt whose upstream is Anthropic itself is sent that, not the
translation, and its events come back as they are. A request the translation cannot carry
(a `document` block, a server tool, `mcp_servers`...) is served when every target of its
model speaks Messages natively, and refused with the translation's 400 otherwise, since a
failover to a translated target could not serve it. A model with `tools: emulate` is always
translated: its tools are rewritten into the prompt.
"""

from __future__ import annotations

from typing import Any

import msgspec
from aiohttp import web

from gateway.errors import BadRequest
from gateway.errors import GatewayError
from gateway.errors import UnknownModel
from gateway.inbound.messages_outbound import MessagesOutbound
from gateway.inbound.messages_outbound import error_json
from gateway.inbound.messages_request import CanonicalRequest
from gateway.inbound.messages_request import translate_request
from gateway.providers.base import NativeRequest
from gateway.providers.registry import forwards_natively
from gateway.server.auth import authenticate
from gateway.server.inference import refuse_while_draining
from gateway.server.inference import serve_chat
from gateway.server.limits import check_messages
from gateway.server.request_body import read_json_object
from gateway.server.request_body import typed
from gateway.server.state import REQUEST_ID
from gateway.server.state import STATE
from gateway.server.state import GatewayState
from gateway.wire.anthropic import InboundRequest
from gateway.wire.openai_chat import ChatRequest

NATIVE_API = "messages"
BETA_HEADER = "anthropic-beta"


def render_error(err: GatewayError) -> bytes:
    return error_json(err)


async def read_messages_body(request: web.Request) -> tuple[dict[str, Any], InboundRequest]:
    authenticate(request, allow_x_api_key=True)
    refuse_while_draining(request)
    body = await read_json_object(request)
    params = typed(body, InboundRequest)
    if not params.messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    check_messages(body, request.app[STATE].config.server.limits)
    return body, params


def _only_native_targets(state: GatewayState, model: str) -> bool:
    """Whether every target of `model` is an upstream that takes Messages requests as
    they are (so no attempt needs the translation)."""
    kinds = {p.name: p.kind for p in state.config.providers}
    try:
        targets = state.router.targets(model)
    except UnknownModel:
        return False  # the translation's own error says more about this request
    for target in targets:
        if not forwards_natively(kinds.get(target.provider, ""), NATIVE_API):
            return False
    return bool(targets)


def _bookkeeping_request(params: InboundRequest) -> CanonicalRequest:
    """What the actor reads of a request that only native attempts serve: the model and
    whether it streams (no upstream is ever sent this)."""
    body: dict[str, Any] = {"model": params.model, "messages": []}
    if isinstance(params.stream, bool):
        body["stream"] = params.stream
    return CanonicalRequest(msgspec.convert(body, ChatRequest), body)


async def messages(request: web.Request) -> web.StreamResponse:
    raw, params = await read_messages_body(request)
    state = request.app[STATE]
    emulated = state.router.emulates_tools(params.model)
    try:
        chat, body = translate_request(params)
    except BadRequest:
        if emulated or not _only_native_targets(state, params.model):
            raise
        chat, body = _bookkeeping_request(params)
    native = None
    if not emulated:
        beta = request.headers.getall(BETA_HEADER, [])
        headers = {BETA_HEADER: ",".join(beta)} if beta else {}
        native = NativeRequest(api=NATIVE_API, body=raw, headers=headers)
    outbound = MessagesOutbound(message_id="msg_" + request[REQUEST_ID], model=params.model)
    return await serve_chat(request, chat, body, outbound=outbound, native=native, api=NATIVE_API)
