"""The StreamActor's non-streaming answers: an upstream's whole answer passed through in the
client's API, or a streamed upstream answer accumulated into one body.

Both run inside one attempt of the actor (which owns the upstream call, the deadlines and the
accounting hooks); the answer leaves as one `web.Response` with the commit headers. Their
first token is the whole answer: `first_token_at` is when it was complete, and decoding and
re-encoding it count as gateway time (`gateway_s`).
"""

from __future__ import annotations

import asyncio
from time import perf_counter
from typing import TYPE_CHECKING

from aiohttp import web

from gateway.errors import UpstreamTimeout
from gateway.routing.router import Attempt
from gateway.upstream.transport import UpstreamBody, open_upstream, read_all

if TYPE_CHECKING:
    from gateway.stream.actor import StreamActor


async def serve_unary(actor: StreamActor, attempt: Attempt) -> web.StreamResponse:
    """Non-streaming upstream, answer passed through as the upstream wrote it."""
    call = actor.call(attempt, stream=False)
    timeouts = attempt.provider.timeouts
    request = attempt.adapter.build_request(call)
    # A non-streaming upstream sends its first byte when it is done: only total_s applies,
    # one deadline for the answer and its body, under one timer.
    alarm = actor.alarm
    alarm.arm(min(actor.loop.time() + timeouts.total_s, actor.deadline))
    actor.gateway_s += perf_counter() - actor.attempt_mark
    body: UpstreamBody | None = None
    try:
        body = await open_upstream(
            actor.pool, attempt.adapter, request, connect_s=timeouts.connect_s
        )
        data = await read_all(body)
    except asyncio.CancelledError:
        if body is not None:
            body.abort()
        if not alarm.expired():
            raise
        if body is None:
            raise UpstreamTimeout(
                f"the upstream did not answer within {timeouts.total_s:g}s"
            ) from None
        raise UpstreamTimeout("the upstream answer took over total_s") from None
    except BaseException:
        if body is not None:
            body.abort()
        raise
    finally:
        alarm.disarm()
    actor.first_byte = actor.loop.time()  # a non-streamed answer's first token
    actor.first_token_at = mark = perf_counter()
    try:
        result = attempt.adapter.unary_result(call, data)
    except BaseException:
        body.abort()
        raise
    body.release()
    actor.usage = result.usage
    answer = actor.outbound.unary(result)
    actor.gateway_s += perf_counter() - mark
    return await respond(actor, answer)


async def serve_accumulated(actor: StreamActor, attempt: Attempt) -> web.StreamResponse:
    """Non-streaming client, streaming-only upstream: accumulate, answer once."""
    acc = (await actor.pump(attempt, deliver=False)).acc
    actor.first_token_at = mark = perf_counter()
    completion = actor.outbound.completion(
        acc,
        id=acc.id or "chatcmpl-" + actor.request_id,
        model=acc.model or attempt.model,
        created=acc.created,
    )
    actor.usage = acc.usage
    actor.gateway_s += perf_counter() - mark
    return await respond(actor, completion)


async def respond(actor: StreamActor, body: bytes) -> web.Response:
    if actor.outbound.settle is not None:
        await actor.outbound.settle()
    return web.Response(body=body, content_type="application/json", headers=actor.commit_headers())
