"""Serving one canonical chat request through a StreamActor: what every inbound API shares.

An inbound API (Chat Completions, Responses, Anthropic Messages) reads and checks its own
request, translates it to the canonical chat request, and hands it here with its `Outbound`.

Accounting wraps the actor: the request is admitted (one store call: key, limits, budget
reservation) before the first upstream request, and settled once (one store call) with the
upstream's usage: for a stream in the actor's `on_answer`, before its tail leaves (so the
usage chunk carries the cost, and a client that saw the end was charged); for a
non-streaming answer before it is returned (`x-gateway-cost-usd`). A stream cut off after
the commit point (client gone, upstream failed) is settled with an estimate of what was
streamed; a request that failed before it is released.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.accounting.prices import usd_text
from gateway.accounting.service import ACCOUNTING, Accounting, Settled, Target, Ticket
from gateway.accounting.usage import estimated_usage, output_cap, tokens_of_chars
from gateway.emulation.request import emulate_tools
from gateway.errors import GatewayError, NoUpstreamAvailable
from gateway.providers.base import NativeRequest
from gateway.routing.router import Attempt
from gateway.server.auth import PRINCIPAL
from gateway.server.state import REQUEST_ID, STATE
from gateway.stream.actor import StreamActor
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.outbound import Outbound
from gateway.wire.openai_chat import ChatRequest

COST_HEADER = "x-gateway-cost-usd"
ESTIMATED_HEADER = "x-gateway-cost-estimated"


def refuse_while_draining(request: web.Request) -> None:
    if request.app[STATE].draining:
        raise NoUpstreamAvailable("The gateway is shutting down", code="server_shutting_down")


def target_of(attempt: Attempt) -> Target:
    return Target(provider=attempt.provider.name, kind=attempt.provider.kind, model=attempt.model)


async def prompt_estimate(request: web.Request) -> int:
    """Prompt tokens a reservation assumes: from the request body's length (already read,
    so this reads nothing)."""
    return tokens_of_chars(len(await request.read()))


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
    accounting = request.app[ACCOUNTING]
    plan = state.router.plan(chat.model)
    emulation = None
    if state.router.emulates_tools(chat.model):
        chat, body, emulation = emulate_tools(chat, body)
    request_id = request[REQUEST_ID]
    if outbound is None:
        options = chat.stream_options
        outbound = ChatOutbound(bool(options and options.include_usage))
    ticket = await accounting.admit(
        request[PRINCIPAL],
        model=chat.model,
        targets=[target_of(a) for a in plan],
        prompt_tokens=await prompt_estimate(request),
        output_cap=output_cap(chat),
        ticket_id=request_id,
    )
    chat_outbound = outbound if isinstance(outbound, ChatOutbound) else None

    async def on_answer(actor: StreamActor) -> None:
        settled = await _settle(accounting, ticket, actor)
        if chat_outbound is not None and settled is not None:
            chat_outbound.cost_usd = usd_text(settled.cost_nanos)

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
        on_answer=on_answer,
    )
    state.enter(actor)
    try:
        response = await actor.run()
    except GatewayError as err:
        await _after_failure(accounting, ticket, actor)
        if actor.attempts:
            err.headers["x-gateway-attempts"] = str(actor.attempts)
        raise
    except BaseException:
        await _after_failure(accounting, ticket, actor)
        raise
    finally:
        state.leave(actor)
    if not ticket.done:
        # a non-streaming answer, or a stream cut off after its commit point
        settled = await _settle(accounting, ticket, actor, response)
        if settled is not None and not actor.stream:
            response.headers[COST_HEADER] = usd_text(settled.cost_nanos)
            if settled.estimated:
                response.headers[ESTIMATED_HEADER] = "true"
    return response


async def _settle(
    accounting: Accounting,
    ticket: Ticket,
    actor: StreamActor,
    response: web.StreamResponse | None = None,
) -> Settled | None:
    if actor.attempt is None:
        await accounting.release(ticket)
        return None
    usage, estimated = actor.usage, False
    if usage is None:
        # No count from the upstream: what was streamed (or, for a non-streaming answer
        # passed through whole, its body) is the estimate.
        text = ""
        if actor.accumulator is None and isinstance(response, web.Response):
            body = response.body
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else ""
        usage = estimated_usage(actor.accumulator, ticket.prompt_tokens, text)
        estimated = True
    return await accounting.settle(
        ticket, usage, estimated=estimated, target=target_of(actor.attempt)
    )


async def _after_failure(accounting: Accounting, ticket: Ticket, actor: StreamActor) -> None:
    """A request that ends in an error (or a cancellation): a stream the client already
    received part of is charged for that part; anything else gives its reservation back."""
    if ticket.done:
        return
    if actor.committed and actor.stream:
        await _settle(accounting, ticket, actor)
    else:
        await accounting.release(ticket)
