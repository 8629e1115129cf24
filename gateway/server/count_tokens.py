"""POST /v1/messages/count_tokens: a count of the request's input tokens, asked of the
model's first planned target when its provider can count (`ProviderAdapter.count_tokens`);
anything else is a 501 rather than an estimate that looks like a count.

It calls the operator's key upstream, so it is limited like inference: it holds a
concurrency slot and is admitted (the key's models, rpm, budget) with a reservation of its
prompt, released when it ends, since a count bills no tokens. The upstream call goes through
the attempt runner like every other: the target's keys in plan order (a key resting or out
of rotation is skipped, the next key of the same target tried on a retryable failure), each
outcome reported to key health, the provider's `total_s` kept by the alarm clock, the
attempt's credentials cut out of any error. Errors leave in Anthropic's shape.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from gateway.accounting.service import ACCOUNTING
from gateway.errors import GatewayError
from gateway.errors import NoUpstreamAvailable
from gateway.errors import UpstreamTimeout
from gateway.inbound.client_urls import check_request as check_client_urls
from gateway.inbound.messages_request import translate_request
from gateway.observability.access import RECORD
from gateway.observability.access import RequestRecord
from gateway.providers.base import NativeRequest
from gateway.providers.base import TokenSource
from gateway.providers.base import UpstreamCall
from gateway.routing.router import Attempt
from gateway.server.auth import PRINCIPAL
from gateway.server.auth import vouch_before_refusing
from gateway.server.inference import prompt_estimate
from gateway.server.limits import SLOTS
from gateway.server.messages import NATIVE_API
from gateway.server.messages import read_messages_body
from gateway.server.state import REQUEST_ID
from gateway.server.state import STATE
from gateway.server.state import GatewayState
from gateway.upstream.attempts import Ended
from gateway.upstream.transport import fetch_all
from gateway.wire.openai_chat import ChatRequest


class CountTokensUnsupported(GatewayError):
    """count_tokens for a model whose first target cannot count: the gateway will not guess."""

    status = 501
    type = "api_error"
    code = "not_implemented"


def _unsupported(model: str, attempt: Attempt) -> CountTokensUnsupported:
    provider = attempt.provider
    return CountTokensUnsupported(
        f"count_tokens is only answered for models served by a provider that counts tokens; "
        f"'{model}' is served by provider '{provider.name}' of kind '{provider.kind}', whose "
        "tokens the gateway cannot count"
    )


async def count_tokens(request: web.Request) -> web.Response:
    raw, params = await read_messages_body(request)
    app = request.app
    state, accounting, principal = app[STATE], app[ACCOUNTING], request[PRINCIPAL]
    try:
        plan = state.router.plan(params.model)
        if not plan:
            raise NoUpstreamAvailable("no upstream target could be tried for this model")
        first = plan[0]
        check_client_urls([], NativeRequest(api=NATIVE_API, body=raw), plan[:1])
        chat, body = translate_request(params, count_only=True)
        counting = TokenCounting(state, request[REQUEST_ID], chat, body, plan, request.get(RECORD))
        if first.adapter.count_tokens(counting.call(first)) is None:
            raise _unsupported(params.model, first)
    except GatewayError as err:
        raise await vouch_before_refusing(request, err) from None
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
            return await counting.run()
        finally:
            await accounting.release(ticket)
    finally:
        slots.give_back(slot)


class TokenCounting:
    """One count_tokens request as the attempt runner's step: the keys of the first target
    (a count is the first target's model's count, so it never fails over to another)."""

    def __init__(
        self,
        state: GatewayState,
        request_id: str,
        chat: ChatRequest,
        body: dict[str, Any],
        plan: list[Attempt],
        record: RequestRecord | None = None,
    ) -> None:
        first = plan[0]
        same = [
            a for a in plan if a.provider.name == first.provider.name and a.model == first.model
        ]
        self._state = state
        self._request_id = request_id
        self._chat = chat
        self._body = body
        running = asyncio.get_running_loop()
        self._loop = running
        self.runner = state.attempt_runner(
            same,
            chat.model,
            journal=record.journal if record is not None else None,
            tracer=record.trace if record is not None else None,
        )
        self._answered_at = 0.0

    def call(self, attempt: Attempt) -> UpstreamCall:
        return self.runner.call(
            attempt, self._chat, self._body, stream=False, request_id=self._request_id
        )

    async def run(self) -> web.Response:
        try:
            return await self.runner.run(self)
        except GatewayError as err:
            if self.runner.attempts:
                err.headers["x-gateway-attempts"] = str(self.runner.attempts)
            raise

    def refuses(self, attempt: Attempt) -> None:
        return None

    def token_source(self, attempt: Attempt) -> TokenSource | None:
        return attempt.adapter.token_source(attempt.key)

    async def send(self, attempt: Attempt) -> web.Response:
        counting = attempt.adapter.count_tokens(self.call(attempt))
        if counting is None:
            raise _unsupported(self._chat.model, attempt)
        timeouts = attempt.provider.timeouts
        counting.request.egress = attempt.provider.egress  # its proxy and TLS trust
        if self.runner.traceparent is not None:  # tracing is on: the attempt span's context
            counting.request.headers["traceparent"] = self.runner.traceparent
        fetched = fetch_all(
            self._state.pool, attempt.adapter, counting.request, connect_s=timeouts.connect_s
        )
        data, _ = await self.runner.bounded(fetched, timeouts.total_s, _timed_out)
        self._answered_at = self._loop.time()
        count = counting.read(data)
        return web.json_response({"input_tokens": count}, headers=self.runner.served_headers())

    def ended(self) -> Ended:
        return Ended(first_byte_at=self._answered_at)


def _timed_out() -> UpstreamTimeout:
    return UpstreamTimeout("count_tokens took over the provider's total_s")
