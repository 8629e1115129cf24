"""POST /v1/embeddings: the OpenAI embeddings API in front of every provider that has one.

The request is checked here (input, encoding_format, dimensions), the router plans the
attempts as for chat, they run through the attempt runner (upstream/attempts.py: key health,
access tokens, the alarm clock, redaction, failover), and each attempt's provider family
(`embeddings` of the kind's spec, sans-IO) builds the upstream requests: one, or several
when the provider caps the inputs per call (sent concurrently, at most `PARALLEL_PARTS` at a
time, merged in input order). A retryable failure of any part fails the attempt over to the
next one, which starts again from the first input. A target whose provider cannot take the
request (no embeddings API, token-id input to a text-only provider, `dimensions` a model
does not take) is skipped; if no target could take it, the client gets that 400.

Each attempt is bounded by its provider's `total_s` (and connect by `connect_s`) and the
whole request by `routing.deadline_s`, on the shared alarm clock like every upstream wait.

Accounting as for chat: admitted (prompt estimate from the body, no output) before the
first upstream request, settled with the upstream's token count at the input price
(`x-gateway-cost-usd`), released on failure.
"""

from __future__ import annotations

import asyncio
from datetime import UTC
from datetime import datetime
from time import perf_counter
from typing import Any

from aiohttp import web
from msgspec import UNSET

from gateway.accounting.prices import usd_text
from gateway.accounting.service import ACCOUNTING
from gateway.accounting.service import Accounting
from gateway.accounting.service import Principal
from gateway.accounting.service import Target
from gateway.errors import BadRequest
from gateway.errors import GatewayError
from gateway.errors import NoUpstreamAvailable
from gateway.errors import UpstreamError
from gateway.errors import UpstreamTimeout
from gateway.observability.access import RECORD
from gateway.observability.access import RequestRecord
from gateway.providers.base import TokenSource
from gateway.providers.embeddings import EmbeddingsCall
from gateway.providers.embeddings import EmbeddingsProvider
from gateway.providers.embeddings import Inputs
from gateway.providers.embeddings import Part
from gateway.providers.embeddings import PartResult
from gateway.providers.embeddings import merge
from gateway.providers.embeddings import parse_input
from gateway.providers.embeddings import render
from gateway.providers.embeddings import texts_of
from gateway.providers.registry import embeddings_provider
from gateway.routing.router import Attempt
from gateway.server.auth import authenticate
from gateway.server.inference import COST_HEADER
from gateway.server.inference import prompt_estimate
from gateway.server.inference import refuse_while_draining
from gateway.server.limits import SLOTS
from gateway.server.request_body import read_json_object
from gateway.server.request_body import typed
from gateway.server.request_record import key_name
from gateway.server.request_record import record_usage
from gateway.server.state import REQUEST_ID
from gateway.server.state import STATE
from gateway.server.state import GatewayState
from gateway.upstream.attempts import AttemptRunner
from gateway.upstream.attempts import Ended
from gateway.upstream.transport import fetch_all
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_embeddings import EmbeddingsRequest
from gateway.wire.openai_embeddings import EmbeddingsUsage

PARALLEL_PARTS = 8


def wants_base64(request: EmbeddingsRequest) -> bool:
    fmt = request.encoding_format
    if fmt is UNSET or fmt is None or fmt == "float":
        return False
    if fmt == "base64":
        return True
    raise BadRequest(
        f"Invalid value for 'encoding_format': {fmt!r}; expected 'float' or 'base64'",
        param="encoding_format",
    )


def dimensions_of(request: EmbeddingsRequest) -> int | None:
    dims = request.dimensions
    if dims is UNSET or dims is None:
        return None
    if dims < 1:
        raise BadRequest("'dimensions' must be at least 1", param="dimensions")
    return dims


async def embeddings(request: web.Request) -> web.Response:
    state = request.app[STATE]
    principal = authenticate(request)
    refuse_while_draining(request)
    body = await read_json_object(request)
    parsed = typed(body, EmbeddingsRequest)
    record = request.get(RECORD)
    if record is not None:
        record.model, record.key = parsed.model, key_name(principal)
    inputs = parse_input(parsed.input)
    accounting = request.app[ACCOUNTING]
    kinds: dict[str, str] = {p.name: p.kind for p in state.config.providers}
    targets = [
        Target(provider=t.provider, kind=kinds.get(t.provider, ""), model=t.model)
        for t in state.router.targets(parsed.model)
    ]
    run = EmbeddingsRun(
        state=state,
        request_id=request[REQUEST_ID],
        body=body,
        inputs=inputs,
        dimensions=dimensions_of(parsed),
        base64=wants_base64(parsed),
        model=parsed.model,
        record=request.get(RECORD),
    )
    slots = request.app[SLOTS]
    slot = slots.take(principal)  # an embeddings call holds the operator's key like a chat
    try:
        return await _serve(request, accounting, principal, run, parsed.model, targets, kinds)
    finally:
        slots.give_back(slot)


async def _serve(
    request: web.Request,
    accounting: Accounting,
    principal: Principal,
    run: EmbeddingsRun,
    model: str,
    targets: list[Target],
    kinds: dict[str, str],
) -> web.Response:
    state, record = request.app[STATE], request.get(RECORD)
    ticket = await accounting.admit(
        principal,
        model=model,
        targets=targets,
        prompt_tokens=await prompt_estimate(request),
        output_cap=0,
        ticket_id=state.new_request_id(),  # minted: never the client's x-request-id
        request_id=request[REQUEST_ID],
    )
    if record is not None and ticket.key is not None:
        record.key, record.key_id = ticket.key.name, ticket.key.id
    state.enter(run)
    started = perf_counter()
    try:
        response = await run.serve()
        tokens = run.usage.prompt_tokens if run.usage is not None else 0
        served = Target(
            provider=response.headers["x-gateway-provider"],
            kind=kinds.get(response.headers["x-gateway-provider"], ""),
            model=response.headers["x-gateway-model"],
        )
        usage = Usage(prompt_tokens=tokens, total_tokens=tokens)
        settled = await accounting.settle(ticket, usage, estimated=False, target=served)
        record_usage(record, usage, settled)
        response.headers[COST_HEADER] = usd_text(settled.cost_nanos)
        return response
    except asyncio.CancelledError:
        if run.shutdown_reason is None:
            raise
        task = asyncio.current_task()
        if task is not None:
            task.uncancel()  # our own cancellation (shutdown): answer instead
        raise NoUpstreamAvailable(run.shutdown_reason, code="server_shutting_down") from None
    except GatewayError as err:
        if run.attempts:
            err.headers["x-gateway-attempts"] = str(run.attempts)
        raise
    finally:
        await accounting.release(ticket)  # a no-op once settled
        state.leave(run)
        if record is not None:
            record.attempts = run.attempts
            if run.attempt is not None:
                record.provider = run.attempt.provider.name
                record.upstream_model = run.attempt.model
                record.overhead_s = started - record.received + run.gateway_s
                record.first_token_at = run.answered_at


class EmbeddingsRun:
    """One embeddings request through its planned attempts (the attempt runner's step);
    `usage` is set on success."""

    def __init__(
        self,
        *,
        state: GatewayState,
        request_id: str,
        body: dict[str, Any],
        inputs: Inputs,
        dimensions: int | None,
        base64: bool,
        model: str,
        record: RequestRecord | None = None,
    ) -> None:
        self._state = state
        self._record = record  # its journal and trace see the attempts
        self._request_id = request_id
        self._request = (inputs, body, dimensions)  # what every attempt's call carries
        self._base64, self._model = base64, model
        self._loop = asyncio.get_running_loop()
        self.runner: AttemptRunner | None = None  # made with the plan, once admitted
        self._family: EmbeddingsProvider | None = None  # the current attempt's
        # perf_counter times: the gateway's own time (before sending, merging the answers)
        # and when the last attempt's answers were all in
        self.gateway_s = 0.0
        self.answered_at = 0.0
        self._answered_loop = 0.0
        self.usage: EmbeddingsUsage | None = None
        self.vectors: list[list[float]] = []  # the answer's, in input order
        self.shutdown_reason: str | None = None
        self._task = asyncio.current_task()

    @property
    def attempts(self) -> int:
        return self.runner.attempts if self.runner is not None else 0

    @property
    def attempt(self) -> Attempt | None:
        """The last attempt that was counted."""
        return self.runner.attempt if self.runner is not None else None

    def shut_down(self, reason: str) -> None:
        """Graceful shutdown ran out of time: end this request with a 503 now."""
        self.shutdown_reason = reason
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def serve(self) -> web.Response:
        state = self._state
        # refusals: a target that cannot take the input moves on to the next one
        record = self._record
        self.runner = runner = state.attempt_runner(
            state.router.plan(self._model),
            self._model,
            refusals=True,
            journal=record.journal if record is not None else None,
            tracer=record.trace if record is not None else None,
        )
        return await runner.run(self)

    @property
    def _runner(self) -> AttemptRunner:
        assert self.runner is not None
        return self.runner

    # --- one attempt (the runner's step) -------------------------------------------------

    def _call(self, attempt: Attempt) -> EmbeddingsCall:
        target = (attempt.provider, attempt.key, attempt.model)
        return EmbeddingsCall(*self._request, *target, datetime.now(UTC), self._runner.token)

    def refuses(self, attempt: Attempt) -> None:
        """400 for a kind without embeddings, or token ids to a text-only family (checked
        before any credential is fetched)."""
        family = self._family = embeddings_provider(attempt.provider)
        if not family.takes_token_ids:
            texts_of(self._call(attempt))

    def token_source(self, attempt: Attempt) -> TokenSource | None:
        assert self._family is not None
        return self._family.token_source(attempt.key)

    async def send(self, attempt: Attempt) -> web.Response:
        mark = perf_counter()
        family = self._family
        assert family is not None
        call = self._call(attempt)
        parts = family.plan(call)
        timeouts = attempt.provider.timeouts
        self.gateway_s += perf_counter() - mark
        results = await self._runner.bounded(
            self._send_all(attempt, family, call, parts),
            timeouts.total_s,
            lambda: UpstreamTimeout(f"the upstream did not answer within {timeouts.total_s:g}s"),
        )
        self._answered_loop = self._loop.time()
        self.answered_at = mark = perf_counter()
        vectors, tokens = merge(call, parts, results)
        self.vectors = vectors
        self.usage = EmbeddingsUsage(prompt_tokens=tokens, total_tokens=tokens)
        body = render(vectors, self._model, tokens, self._base64)
        self.gateway_s += perf_counter() - mark
        return web.Response(
            body=body,
            content_type="application/json",
            headers={"x-request-id": self._request_id, **self._runner.served_headers()},
        )

    def ended(self) -> Ended:
        usage = Usage(prompt_tokens=self.usage.prompt_tokens) if self.usage else None
        return Ended(first_byte_at=self._answered_loop, usage=usage)

    async def _send_all(
        self, attempt: Attempt, family: EmbeddingsProvider, call: EmbeddingsCall, parts: list[Part]
    ) -> list[PartResult]:
        if len(parts) == 1:
            return [await self._send(attempt, family, call, parts[0])]
        slots = asyncio.Semaphore(PARALLEL_PARTS)

        async def send_in_slot(part: Part) -> PartResult:
            async with slots:
                return await self._send(attempt, family, call, part)

        try:
            async with asyncio.TaskGroup() as group:
                tasks = [
                    group.create_task(send_in_slot(part), name=f"embeddings-part-{part.start}")
                    for part in parts
                ]
        except BaseExceptionGroup as failed:
            upstream = _first_upstream_error(failed)
            if upstream is None:
                raise
            raise upstream from None
        return [task.result() for task in tasks]

    async def _send(
        self, attempt: Attempt, family: EmbeddingsProvider, call: EmbeddingsCall, part: Part
    ) -> PartResult:
        connect_s = attempt.provider.timeouts.connect_s
        part.request.egress = attempt.provider.egress  # its proxy and TLS trust
        if self._runner.traceparent is not None:  # tracing is on: the attempt span's context
            part.request.headers["traceparent"] = self._runner.traceparent
        data, headers = await fetch_all(
            self._state.pool, attempt.adapter, part.request, connect_s=connect_s
        )
        return family.parse(call, part, data, headers)


def _first_upstream_error(group: BaseExceptionGroup[Any]) -> UpstreamError | None:
    for exc in group.exceptions:
        if isinstance(exc, UpstreamError):
            return exc
        if isinstance(exc, BaseExceptionGroup):
            found = _first_upstream_error(exc)
            if found is not None:
                return found
    return None
