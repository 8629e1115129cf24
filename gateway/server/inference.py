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

What the request's metrics and access line need (gateway/observability/access.py) is put on
its `RequestRecord` as the request goes (request_record.py: what the record learns from the
outcome and the usage).
"""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from functools import partial
from time import perf_counter
from typing import Any

from aiohttp import web

from gateway.accounting.prices import usd_text
from gateway.accounting.service import ACCOUNTING
from gateway.accounting.service import Accounting
from gateway.accounting.service import Settled
from gateway.accounting.service import Ticket
from gateway.accounting.usage import estimated_usage
from gateway.accounting.usage import output_cap
from gateway.accounting.usage import tokens_of_chars
from gateway.cache.serve import answer_hit
from gateway.cache.serve import keep
from gateway.cache.serve import look_up
from gateway.cache.service import CACHE_HEADER
from gateway.cache.service import Lookup
from gateway.config import Recovery
from gateway.emulation.request import ToolEmulation
from gateway.emulation.request import emulate_tools
from gateway.errors import GatewayError
from gateway.errors import NoUpstreamAvailable
from gateway.inbound.client_urls import check_request as check_client_urls
from gateway.observability.access import RECORD
from gateway.observability.access import RequestRecord
from gateway.observability.metrics import OTHER_ROUTE
from gateway.providers.base import NativeRequest
from gateway.routing.router import Attempt
from gateway.server.auth import PRINCIPAL
from gateway.server.auth import vouch_before_refusing
from gateway.server.limits import SLOTS
from gateway.server.limits import check_chat
from gateway.server.request_body import RAW_BODY
from gateway.server.request_body import body_bytes
from gateway.server.request_record import key_name
from gateway.server.request_record import observed
from gateway.server.request_record import record_usage
from gateway.server.state import REQUEST_ID
from gateway.server.state import STATE
from gateway.server.state import GatewayState
from gateway.stream.actor import StreamActor
from gateway.stream.chat_outbound import ChatOutbound
from gateway.stream.outbound import Outbound
from gateway.stream.served import ChatJob
from gateway.stream.served import StreamOutcome
from gateway.upstream.retries import RetryPolicy
from gateway.wire.openai_chat import ChatRequest

COST_HEADER = "x-gateway-cost-usd"
ESTIMATED_HEADER = "x-gateway-cost-estimated"


def refuse_while_draining(request: web.Request) -> None:
    if request.app[STATE].draining:
        raise NoUpstreamAvailable("The gateway is shutting down", code="server_shutting_down")


async def prompt_estimate(request: web.Request) -> int:
    """Prompt tokens a reservation assumes: from the request body's length (already read,
    so this reads nothing)."""
    return tokens_of_chars(len(await body_bytes(request)))


async def serve_chat(
    request: web.Request,
    chat: ChatRequest,
    body: dict[str, Any],
    *,
    outbound: Outbound | None = None,
    native: NativeRequest | None = None,
    history_chars: int = 0,
    api: str = "chat",
) -> web.StreamResponse:
    """Plan the attempts for `chat.model` and run the actor; `body` is the canonical request
    as JSON (what an OpenAI-compatible upstream is sent), `outbound` the client's API (chat
    when None), `native` the client's own request for upstreams that speak its API,
    `history_chars` the size of stored history the upstream is sent besides the body (a
    Responses `previous_response_id`): the reservation's prompt estimate counts both;
    `api` names the inbound API (the response cache keys by it).

    A chat request is checked against `server.limits` here (the other APIs check their own
    requests, in their terms); every request holds a concurrency slot until it ends. (One
    coroutine from here to the actor: every await layer costs on every request.)"""
    app = request.app
    state = app[STATE]
    if outbound is None:
        check_chat(chat, state.config.server.limits)
    principal = request[PRINCIPAL]
    slots = app[SLOTS]
    slot = slots.take(principal)
    lookup: Lookup | None = None
    try:
        accounting = app[ACCOUNTING]
        record = request.get(RECORD)
        if record is not None:
            record.model, record.stream = chat.model, bool(chat.stream)
            record.key = key_name(principal)
        router = state.router
        asked = chat  # as the client sent it (tool emulation below rewrites it)
        emulation = None
        if router.emulates_tools(chat.model):
            chat, body, emulation = emulate_tools(chat, body)
        if outbound is None:
            options = chat.stream_options
            outbound = ChatOutbound(bool(options and options.include_usage))
        cache = state.cache
        if cache is not None:
            # before planning and admission: a hit reserves nothing and sends nothing, so it
            # needs no usable upstream key (and makes no client-URL check: the identical
            # request it replays passed it before it was stored)
            try:
                targets = router.cache_targets(chat.model)
            except GatewayError as err:
                raise await vouch_before_refusing(request, err) from None
            lookup = await look_up(
                request,
                cache,
                api=api,
                namespace=cache.namespace(principal.kind, principal.secret_hash),
                model=chat.model,
                targets=targets,
                body=body,
                native=native.body if native is not None else None,
                metrics=router.metrics,
                record=record,
            )
            if lookup.answer is not None:
                key = await accounting.permit_hit(principal, chat.model)
                if record is not None and key is not None:
                    record.key, record.key_id = key.name, key.id
                accounting.hits.note(
                    key.id if key is not None else "", chat.model, lookup.answer.cost_nanos
                )
                return await answer_hit(
                    request,
                    lookup.answer,
                    outbound,
                    stream=bool(chat.stream),
                    request_id=request[REQUEST_ID],
                    model=chat.model,
                    metrics=router.metrics,
                    record=record,
                    similarity=lookup.similarity,
                )
        try:
            plan = router.plan(chat.model)
            check_client_urls(asked.messages, native, plan)
        except GatewayError as err:
            raise await vouch_before_refusing(request, err) from None
        ticket = await accounting.admit(
            principal,
            model=chat.model,
            targets=[accounting.target(a.provider, a.model) for a in plan],
            prompt_tokens=tokens_of_chars(
                len(request.get(RAW_BODY) or await body_bytes(request)) + history_chars
            ),
            output_cap=output_cap(chat),
            # the store's identity of this request is minted here, never the client's
            # x-request-id: a reused id must not merge two requests' window entries or
            # reservations
            ticket_id=state.new_request_id(),
            request_id=request[REQUEST_ID],
        )
        if record is not None and ticket.key is not None:
            record.key, record.key_id = ticket.key.name, ticket.key.id
        on_answer = _stream_settler(accounting, ticket, record, outbound)
        recovery = router.recovery(chat.model) if chat.stream else None
        if recovery is not None:
            # a stream that may be continued elsewhere is translated, so that the gateway
            # owns its identity (docs/routing.md, "Continuation after content")
            native = None
        actor = _actor(
            request,
            state,
            chat,
            body,
            plan,
            outbound,
            native,
            emulation,
            on_answer,
            cache_result=lookup.result if lookup is not None else None,
            recovery=recovery,
            prompt_tokens=ticket.prompt_tokens,
        )
        streams = None
        if chat.stream:
            route = record.route if record is not None else OTHER_ROUTE
            streams = router.metrics.active_streams_for(route)
            streams.inc()
        state.enter(actor)
        started = perf_counter()
        outcome: StreamOutcome | None = None
        try:
            try:
                outcome = await actor.run()
            except BaseException:
                outcome = actor.outcome()  # cancelled (the client left): where it stood
                await _after_failure(accounting, ticket, outcome, record)
                raise
            response, error = outcome.response, outcome.error
            if response is None:
                await _after_failure(accounting, ticket, outcome, record)
                assert error is not None
                if outcome.attempts:
                    error.headers["x-gateway-attempts"] = str(outcome.attempts)
                raise error
        finally:
            state.leave(actor)
            if streams is not None:
                streams.dec()
            if record is not None:
                observed(record, outcome or actor.outcome(), started)
        if not ticket.done:
            # a non-streaming answer, or a stream cut off after its commit point
            settled = await _settle(accounting, ticket, outcome, response, record=record)
            if settled is not None and not outcome.stream:
                response.headers[COST_HEADER] = usd_text(settled.cost_nanos)
                if settled.estimated:
                    response.headers[ESTIMATED_HEADER] = "true"
        if lookup is not None:
            await keep(accounting, state.cache, lookup, outcome, chat.model, emulation is not None)
        return response
    finally:
        if lookup is not None and state.cache is not None:
            state.cache.abandon(lookup)  # ended without an answer: its waiters go upstream
        slots.give_back(slot)


def _actor(
    request: web.Request,
    state: GatewayState,
    chat: ChatRequest,
    body: dict[str, Any],
    plan: list[Attempt],
    outbound: Outbound,
    native: NativeRequest | None,
    emulation: ToolEmulation | None,
    on_answer: Callable[[StreamOutcome], Awaitable[None]],
    *,
    cache_result: str | None = None,
    recovery: Recovery | None = None,
    prompt_tokens: int = 0,
) -> StreamActor:
    request_id = request[REQUEST_ID]
    record = request.get(RECORD)
    # both None unless the request log (journal) or tracing (trace) keeps the request
    journal, tracer = (record.journal, record.trace) if record is not None else (None, None)
    headers = {"x-request-id": request_id}
    if cache_result is not None:
        headers[CACHE_HEADER] = cache_result
    job = ChatJob(
        request=chat,
        body=body,
        plan=plan,
        request_id=request_id,
        headers=headers,
        deadline_s=state.config.routing.deadline_s,
        native=native,
        tool_emulation=emulation,
        journal=journal,
        tracer=tracer,
        retries=RetryPolicy.of(state.config.routing),
        wider=partial(state.router.wider, chat.model),
        recovery=recovery,
        prompt_tokens=prompt_tokens,
    )
    return StreamActor(
        request,
        job,
        pool=state.pool,
        tokens=state.tokens,
        server=state.config.server,
        outbound=outbound,
        on_answer=on_answer,
    )


def _stream_settler(
    accounting: Accounting, ticket: Ticket, record: RequestRecord | None, outbound: Outbound
) -> Callable[[StreamOutcome], Awaitable[None]]:
    """The actor's `on_answer`: a stream is settled once its answer is complete, and a chat
    stream's usage chunk carries the cost."""
    chat_outbound = outbound if isinstance(outbound, ChatOutbound) else None

    async def on_answer(outcome: StreamOutcome) -> None:
        settled = await _settle(accounting, ticket, outcome, record=record)
        if chat_outbound is not None and settled is not None:
            chat_outbound.cost_usd = usd_text(settled.cost_nanos)

    return on_answer


async def _settle(
    accounting: Accounting,
    ticket: Ticket,
    outcome: StreamOutcome,
    response: web.StreamResponse | None = None,
    *,
    record: RequestRecord | None = None,
) -> Settled | None:
    attempt = outcome.attempt
    if attempt is None:
        await accounting.release(ticket)
        return None
    usage, estimated = outcome.usage, outcome.usage_estimated
    if usage is None:
        # No count from the upstream: what was streamed (or, for a non-streaming answer
        # passed through whole, its body) is the estimate.
        text = ""
        if outcome.accumulator is None and isinstance(response, web.Response):
            body = response.body
            text = body.decode("utf-8", "replace") if isinstance(body, bytes) else ""
        usage = estimated_usage(outcome.accumulator, ticket.prompt_tokens, text)
        estimated = True
    target = accounting.target(attempt.provider, attempt.model)
    settled = await accounting.settle(ticket, usage, estimated=estimated, target=target)
    record_usage(record, usage, settled)
    return settled


async def _after_failure(
    accounting: Accounting, ticket: Ticket, outcome: StreamOutcome, record: RequestRecord | None
) -> None:
    """A request that ends in an error (or a cancellation): a stream the client already
    received part of is charged for that part; anything else gives its reservation back."""
    if ticket.done:
        return
    if outcome.committed and outcome.stream:
        await _settle(accounting, ticket, outcome, record=record)
    else:
        await accounting.release(ticket)
