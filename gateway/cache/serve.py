"""What the request path calls (gateway/server/inference.py): ask the cache before
admission, answer a hit, keep a miss's answer. The request's record and metrics learn the
cache's result here; a hit costs 0 and records what it saved.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from gateway.accounting.prices import cost_nanos
from gateway.accounting.service import Accounting
from gateway.cache.entry import CachedAnswer
from gateway.cache.replay import answer_of_outcome
from gateway.cache.replay import serve_hit
from gateway.cache.service import CACHE_HEADER
from gateway.cache.service import Lookup
from gateway.cache.service import ResponseCache
from gateway.cache.service import stamped
from gateway.observability.access import RequestRecord
from gateway.observability.metrics import GatewayMetrics
from gateway.stream.outbound import Outbound
from gateway.stream.served import StreamOutcome

COST_HEADER = "x-gateway-cost-usd"
SIMILARITY_HEADER = "x-gateway-cache-similarity"


async def look_up(
    request: web.Request,
    cache: ResponseCache,
    *,
    api: str,
    namespace: str,
    model: str,
    targets: list[str],
    body: dict[str, Any],
    native: dict[str, Any] | None,
    metrics: GatewayMetrics,
    record: RequestRecord | None,
) -> Lookup:
    lookup = await cache.lookup(
        request.headers,
        api=api,
        namespace=namespace,
        model=model,
        targets=targets,
        chat=body,
        native=native,
    )
    metrics.cache_request_for(model, lookup.result).inc()
    if record is not None:
        record.cache = lookup.result
    return lookup


async def answer_hit(
    request: web.Request,
    answer: CachedAnswer,
    outbound: Outbound,
    *,
    stream: bool,
    request_id: str,
    model: str,
    metrics: GatewayMetrics,
    record: RequestRecord | None,
    similarity: float | None = None,
) -> web.StreamResponse:
    saved = answer.cost_nanos / 1e9
    metrics.cache_saved_for(model).inc(saved)
    if record is not None:
        record.cost_usd, record.cache_saved_usd = 0.0, saved
        record.provider, record.upstream_model = answer.provider or None, answer.upstream_model
        record.finish_reason = answer.finish_reason
        usage = answer.usage
        if usage is not None:
            record.input_tokens, record.output_tokens = usage.prompt_tokens, usage.completion_tokens
    if hasattr(outbound, "cost_usd"):
        outbound.cost_usd = "0"  # a chat stream's usage chunk: this request cost nothing
    headers = {"x-request-id": request_id, CACHE_HEADER: "hit"}
    if similarity is not None:  # a semantic hit: how close the stored question was
        headers[SIMILARITY_HEADER] = f"{similarity:.4f}"
    if not stream:
        headers[COST_HEADER] = "0"
    return await serve_hit(
        request,
        answer,
        outbound,
        stream=stream,
        request_id=request_id,
        model=model,
        headers=headers,
    )


async def keep(
    accounting: Accounting,
    cache: ResponseCache | None,
    lookup: Lookup,
    outcome: StreamOutcome,
    model: str,
    emulated: bool,
) -> None:
    """The request ended: its answer (when complete) to its waiters and the store, with who
    served it and what it cost (what each later hit saves)."""
    attempt = outcome.attempt
    if cache is None or attempt is None:
        return
    answer = answer_of_outcome(outcome, emulated)
    if answer is not None:
        price = accounting.price(model, accounting.target(attempt.provider, attempt.model))
        usage = outcome.usage
        cost = cost_nanos(usage, price) if usage is not None and price is not None else 0
        answer = stamped(
            answer, provider=attempt.provider.name, upstream_model=attempt.model, cost_nanos=cost
        )
    await cache.finish(lookup, answer)
