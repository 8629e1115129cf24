"""POST /v1/messages and POST /v1/messages/count_tokens: the Anthropic Messages API in
front of any provider.

A Messages request is translated to the canonical chat request (inbound/messages_request.py)
and served by `serve_chat` like any other, with `MessagesOutbound` rendering the answer as
Anthropic events; failover, the commit point, keep-alives and tool emulation all come from
there. Errors on these routes leave in Anthropic's shape (`render_error`, registered under
`ERROR_SHAPES` by the app).
"""

from __future__ import annotations

import asyncio

import msgspec
from aiohttp import web

from gateway.errors import (
    BadRequest,
    GatewayError,
    NoUpstreamAvailable,
    UpstreamError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from gateway.inbound.messages_outbound import MessagesOutbound, error_json
from gateway.inbound.messages_request import count_tokens_request, translate_request
from gateway.providers.base import UpstreamCall
from gateway.server.auth import authorize
from gateway.server.inference import refuse_while_draining, serve_chat
from gateway.server.request_body import read_json_object, typed
from gateway.server.state import REQUEST_ID, STATE
from gateway.stream.outcome import final_error
from gateway.stream.transport import open_upstream, read_all
from gateway.wire.anthropic import InboundRequest


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


async def _read_request(request: web.Request) -> InboundRequest:
    authorize(request, request.app[STATE].config.auth.master_key, allow_x_api_key=True)
    refuse_while_draining(request)
    params = typed(await read_json_object(request), InboundRequest)
    if not params.messages:
        raise BadRequest("messages: at least one message is required", param="messages")
    return params


async def messages(request: web.Request) -> web.StreamResponse:
    params = await _read_request(request)
    chat, body = translate_request(params)
    outbound = MessagesOutbound(message_id="msg_" + request[REQUEST_ID], model=params.model)
    return await serve_chat(request, chat, body, outbound=outbound)


async def count_tokens(request: web.Request) -> web.Response:
    """Forwarded to the model's first planned target when it is an `anthropic` provider;
    anything else is a 501 rather than an estimate that looks like a count."""
    params = await _read_request(request)
    chat, body = translate_request(params, count_only=True)
    state = request.app[STATE]
    plan = state.router.plan(params.model)
    if not plan:
        raise NoUpstreamAvailable("no upstream target could be tried for this model")
    attempt = plan[0]
    if attempt.provider.kind != "anthropic":
        raise CountTokensUnsupported(
            f"count_tokens is only answered for models served by an anthropic provider; "
            f"'{params.model}' is served by provider '{attempt.provider.name}' of kind "
            f"'{attempt.provider.kind}', whose tokens the gateway cannot count"
        )
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
        raise final_error([err]) from None
    headers = {
        "x-gateway-provider": attempt.provider.name,
        "x-gateway-model": attempt.model,
        "x-gateway-attempts": "1",
    }
    return web.json_response({"input_tokens": count}, headers=headers)
