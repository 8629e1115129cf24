"""POST /v1/messages and POST /v1/messages/count_tokens: the Anthropic Messages API in
front of any provider.

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

import asyncio
from typing import Any

import msgspec
from aiohttp import web

from gateway.accounting.service import ACCOUNTING
from gateway.errors import (
    BadRequest,
    GatewayError,
    NoUpstreamAvailable,
    UnknownModel,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.inbound.client_urls import check_request as check_client_urls
from gateway.inbound.messages_outbound import MessagesOutbound, error_json
from gateway.inbound.messages_request import (
    CanonicalRequest,
    count_tokens_request,
    translate_request,
)
from gateway.providers.base import NativeRequest, UpstreamCall, hide_credentials
from gateway.providers.registry import ADAPTERS
from gateway.routing.router import Attempt
from gateway.server.auth import PRINCIPAL, authenticate
from gateway.server.inference import prompt_estimate, refuse_while_draining, serve_chat
from gateway.server.limits import SLOTS, check_messages
from gateway.server.request_body import read_json_object, typed
from gateway.server.state import REQUEST_ID, STATE, GatewayState
from gateway.upstream.outcome import final_error
from gateway.upstream.transport import open_upstream, read_all
from gateway.wire.anthropic import InboundRequest
from gateway.wire.openai_chat import ChatRequest

NATIVE_API = "messages"
BETA_HEADER = "anthropic-beta"


class CountTokensUnsupported(GatewayError):
    """count_tokens for a model whose first target cannot count: the gateway will not guess."""

    status = 501
    type = "api_error"
    code = "not_implemented"


class _TokenCount(msgspec.Struct):
    input_tokens: int


_count_decoder = msgspec.json.Decoder(_TokenCount)


def render_error(err: GatewayError) -> bytes:
    return error_json(err)


async def _read_body(request: web.Request) -> tuple[dict[str, Any], InboundRequest]:
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
        # the adapter class of the target's kind: `native_apis` is a class attribute
        factory = ADAPTERS.get(kinds.get(target.provider, ""))
        if NATIVE_API not in getattr(factory, "native_apis", frozenset()):
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
    raw, params = await _read_body(request)
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
    return await serve_chat(request, chat, body, outbound=outbound, native=native)


async def count_tokens(request: web.Request) -> web.Response:
    """Forwarded to the model's first planned target when it is an `anthropic` provider;
    anything else is a 501 rather than an estimate that looks like a count.

    It calls the operator's key upstream, so it is limited like inference: it holds a
    concurrency slot and is admitted (the key's models, rpm, budget) with a reservation of
    its prompt, released when it ends, since a count bills no tokens."""
    raw, params = await _read_body(request)
    app = request.app
    state, accounting, principal = app[STATE], app[ACCOUNTING], request[PRINCIPAL]
    plan = state.router.plan(params.model)
    if not plan:
        raise NoUpstreamAvailable("no upstream target could be tried for this model")
    attempt = plan[0]
    check_client_urls([], NativeRequest(api=NATIVE_API, body=raw), plan[:1])
    chat, body = translate_request(params, count_only=True)
    if attempt.provider.kind != "anthropic":
        raise CountTokensUnsupported(
            f"count_tokens is only answered for models served by an anthropic provider; "
            f"'{params.model}' is served by provider '{attempt.provider.name}' of kind "
            f"'{attempt.provider.kind}', whose tokens the gateway cannot count"
        )
    slots = app[SLOTS]
    slot = slots.take(principal)
    try:
        ticket = await accounting.admit(
            principal,
            model=params.model,
            targets=[accounting.target(a.provider, a.model) for a in plan],
            prompt_tokens=await prompt_estimate(request),
            output_cap=0,
            ticket_id=state.new_request_id(),
            request_id=request[REQUEST_ID],
        )
        try:
            return await _count(request, state, attempt, chat, body)
        finally:
            await accounting.release(ticket)
    finally:
        slots.give_back(slot)


async def _count(
    request: web.Request,
    state: GatewayState,
    attempt: Attempt,
    chat: ChatRequest,
    body: dict[str, Any],
) -> web.Response:
    call = UpstreamCall(
        request=chat,
        body=body,
        provider=attempt.provider,
        key=attempt.key,
        model=attempt.model,
        stream=False,
        request_id=request[REQUEST_ID],
    )
    upstream = count_tokens_request(attempt.adapter, call)
    timeouts = attempt.provider.timeouts
    try:
        async with asyncio.timeout(timeouts.total_s):
            answer = await open_upstream(
                state.pool, attempt.adapter, upstream, connect_s=timeouts.connect_s
            )
            try:
                data = await read_all(answer)
            except BaseException:
                answer.abort()
                raise
            answer.release()
        count = _count_decoder.decode(data).input_tokens
    except TimeoutError:
        raise UpstreamTimeout("count_tokens took over the provider's total_s") from None
    except msgspec.DecodeError as exc:
        raise final_error(
            [UpstreamProtocolError(f"malformed count_tokens answer: {exc}")]
        ) from None
    except UpstreamError as err:
        raise final_error([hide_credentials(err, attempt.key)]) from None
    headers = {
        "x-gateway-provider": attempt.provider.name,
        "x-gateway-model": attempt.model,
        "x-gateway-attempts": "1",
    }
    return web.json_response({"input_tokens": count}, headers=headers)
