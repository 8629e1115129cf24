"""POST /v1/embeddings: the OpenAI embeddings API in front of every provider that has one.

The request is checked here (input, encoding_format, dimensions), the router plans the
attempts as for chat, and each attempt's provider family (gateway/embeddings/, sans-IO)
builds the upstream requests: one, or several when the provider caps the inputs per call
(sent concurrently, at most `PARALLEL_PARTS` at a time, merged in input order). A retryable
failure of any part fails the attempt over to the next one, which starts again from the
first input. A target whose provider cannot take the request (no embeddings API, token-id
input to a text-only provider, `dimensions` a model does not take) is skipped; if no target
could take it, the client gets that 400.

Each attempt is bounded by its provider's `total_s` (and connect by `connect_s`) and the
whole request by `routing.deadline_s`.

Accounting as for chat: admitted (prompt estimate from the body, no output) before the
first upstream request, settled with the upstream's token count at the input price
(`x-gateway-cost-usd`), released on failure.
"""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime
from time import perf_counter
from typing import Any

from aiohttp import web
from msgspec import UNSET

from gateway.accounting.prices import usd_text
from gateway.accounting.service import ACCOUNTING, Accounting, Principal, Target
from gateway.errors import (
    BadRequest,
    ClientError,
    GatewayError,
    NoUpstreamAvailable,
    UpstreamConnectError,
    UpstreamError,
    UpstreamTimeout,
)
from gateway.observability.access import RECORD
from gateway.providers.base import hide_credentials
from gateway.providers.embeddings import (
    EmbeddingsCall,
    EmbeddingsProvider,
    Inputs,
    Part,
    PartResult,
    merge,
    parse_input,
    render,
    texts_of,
)
from gateway.providers.registry import embeddings_provider
from gateway.routing.balancer import unavailable
from gateway.routing.health import REFUSED
from gateway.routing.router import Attempt
from gateway.server.auth import authenticate
from gateway.server.inference import (
    COST_HEADER,
    key_name,
    prompt_estimate,
    record_usage,
    refuse_while_draining,
)
from gateway.server.limits import SLOTS
from gateway.server.request_body import read_json_object, typed
from gateway.server.state import REQUEST_ID, STATE, GatewayState
from gateway.upstream.http_client import UpstreamResponse
from gateway.upstream.outcome import count_move, final_error, report_failure, report_success
from gateway.upstream.transport import open_upstream, read_all
from gateway.wire.openai_chat import Usage
from gateway.wire.openai_embeddings import EmbeddingsRequest, EmbeddingsUsage

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
        record.key = ticket.key.name
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
    """One embeddings request through its planned attempts; `usage` is set on success."""

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
    ) -> None:
        self._state = state
        self._request_id = request_id
        self._body = body
        self._inputs = inputs
        self._dimensions = dimensions
        self._base64 = base64
        self._model = model
        self._loop = asyncio.get_running_loop()
        self._deadline = self._loop.time() + state.config.routing.deadline_s
        self.attempts = 0
        self.attempt: Attempt | None = None  # the last one that sent upstream requests
        # perf_counter times: the gateway's own time (before sending, merging the answers)
        # and when the last attempt's answers were all in
        self.gateway_s = 0.0
        self.answered_at = 0.0
        self.usage: EmbeddingsUsage | None = None
        self.shutdown_reason: str | None = None
        self._task = asyncio.current_task()

    def shut_down(self, reason: str) -> None:
        """Graceful shutdown ran out of time: end this request with a 503 now."""
        self.shutdown_reason = reason
        if self._task is not None and not self._task.done():
            self._task.cancel()

    async def serve(self) -> web.Response:
        plan = self._state.router.plan(self._model)
        errors: list[UpstreamError] = []
        refused: ClientError | None = None
        skipped: list[tuple[float, bool]] = []
        previous: Attempt | None = None
        for attempt in plan:
            if self._loop.time() >= self._deadline:
                break
            # key health as for chat: a key resting or out of rotation since the plan was
            # drawn is skipped, and every outcome is reported to it
            now = time.monotonic()
            ticket = attempt.health.begin(now, attempt.model)
            if ticket == REFUSED:
                skipped.append(attempt.health.refusal(now, attempt.model))
                continue
            if previous is not None:
                count_move(previous, attempt, self._model)
            previous = attempt
            started = self._loop.time()
            try:
                response = await self._try(attempt)
            except ClientError as err:
                attempt.health.released(ticket)
                refused = refused or err  # this target cannot take the request: the next may
                continue
            except UpstreamError as err:
                hide_credentials(err, attempt.key)
                report_failure(attempt, ticket, err)
                errors.append(err)
                if not err.retryable:
                    break
                continue
            except BaseException:
                attempt.health.released(ticket)
                raise
            usage = Usage(prompt_tokens=self.usage.prompt_tokens) if self.usage else None
            report_success(attempt, ticket, self._loop.time() - started, usage)
            return response
        if errors:
            raise final_error(errors)
        if refused is not None:
            raise refused
        if skipped:
            raise unavailable(self._model, skipped)
        raise NoUpstreamAvailable("no upstream target could be tried for this model")

    async def _try(self, attempt: Attempt) -> web.Response:
        mark = perf_counter()
        family = embeddings_provider(attempt.provider)
        call = EmbeddingsCall(
            inputs=self._inputs,
            body=self._body,
            dimensions=self._dimensions,
            provider=attempt.provider,
            key=attempt.key,
            model=attempt.model,
            now=datetime.now(UTC),
        )
        if not family.takes_token_ids:
            texts_of(call)  # refuse token ids before fetching any credential
        if not family.needs_access_token:
            parts = family.plan(call)
            self.attempts += 1
        else:
            self.attempts += 1
            call.access_token = await self._token_for(attempt)
            parts = family.plan(call)
        timeouts = attempt.provider.timeouts
        until = min(self._loop.time() + timeouts.total_s, self._deadline)
        self.attempt = attempt
        self.gateway_s += perf_counter() - mark
        try:
            async with asyncio.timeout_at(until):
                results = await self._send_all(attempt, family, call, parts)
        except TimeoutError:
            raise UpstreamTimeout(
                f"the upstream did not answer within {timeouts.total_s:g}s"
            ) from None
        self.answered_at = mark = perf_counter()
        vectors, tokens = merge(call, parts, results)
        self.usage = EmbeddingsUsage(prompt_tokens=tokens, total_tokens=tokens)
        body = render(vectors, self._model, tokens, self._base64)
        self.gateway_s += perf_counter() - mark
        return web.Response(
            body=body,
            content_type="application/json",
            headers={
                "x-request-id": self._request_id,
                "x-gateway-provider": attempt.provider.name,
                "x-gateway-model": attempt.model,
                "x-gateway-attempts": str(self.attempts),
            },
        )

    async def _token_for(self, attempt: Attempt) -> str:
        credentials = attempt.key.credentials_file if attempt.key is not None else None
        if not credentials:
            raise UpstreamConnectError(f"provider {attempt.provider.name!r} has no credentials")
        return await self._state.tokens.token(credentials)

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
        body = await open_upstream(
            self._state.pool, attempt.adapter, part.request, connect_s=connect_s
        )
        try:
            data = await read_all(body)
        except BaseException:
            body.abort()
            raise
        headers = body.head.headers if isinstance(body, UpstreamResponse) else {}
        body.release()
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
