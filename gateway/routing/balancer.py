"""Choosing among healthy candidates, and the answer when there is none (no IO).

Strategies (`routing.strategy`), applied to the targets of one priority and to the keys of
one provider alike:

    weighted        random, each next pick drawn with probability ~ its weight (default)
    least_inflight  fewest attempts in flight first (a target counts its best key)
    latency         lowest EWMA of time to first byte first; keys never measured go first

Ties under the last two keep the weighted random order, so equal keys still share the load.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import TypeVar

from gateway.errors import NoUpstreamAvailable
from gateway.errors import UpstreamsRateLimited
from gateway.routing.health import KeyHealth

T = TypeVar("T")

UNMEASURED = -1.0  # the latency score of a key with no measurement yet: tried first


def weighted_order(items: Sequence[T], weights: Sequence[int], rng: random.Random) -> list[T]:
    """`items` in a random order where each next item is drawn with probability ~ its weight."""
    pool = list(zip(items, weights, strict=True))
    out: list[T] = []
    while pool:
        total = sum(w for _, w in pool)
        pick = rng.random() * total
        for i, (item, weight) in enumerate(pool):
            pick -= weight
            if pick < 0 or i == len(pool) - 1:
                out.append(item)
                del pool[i]
                break
    return out


def key_score(strategy: str, health: KeyHealth) -> float:
    if strategy == "least_inflight":
        return float(health.inflight)
    ttft = health.ewma_ttft
    return UNMEASURED if ttft is None else ttft


def strategy_order(
    strategy: str,
    items: Sequence[T],
    weights: Sequence[int],
    scores: Sequence[float],
    rng: random.Random,
) -> list[T]:
    """`items` ordered by `strategy`: a weighted draw, then (unless `weighted`) a stable sort
    by score, lowest first."""
    if strategy == "weighted":
        return weighted_order(items, weights, rng)
    drawn = weighted_order(list(zip(items, scores, strict=True)), weights, rng)
    drawn.sort(key=lambda pair: pair[1])
    return [item for item, _ in drawn]


def unavailable(model: str, waits: list[tuple[float, bool]]) -> NoUpstreamAvailable:
    """The error for a request none of whose keys may be tried now. `waits` holds, per key
    skipped, how long until it may be tried and whether only rate limits keep it away.
    `Retry-After` is the soonest recovery, in whole seconds (at least 1)."""
    soonest = min((w for w, _ in waits), default=1.0)
    retry_after = str(max(1, math.ceil(soonest)))
    err: NoUpstreamAvailable
    if waits and all(rate_only for _, rate_only in waits):
        err = UpstreamsRateLimited(
            f"every upstream key that serves '{model}' is resting after rate limits; "
            f"retry after {retry_after}s"
        )
    else:
        err = NoUpstreamAvailable(
            f"no healthy upstream key or target for '{model}' right now (cooling down, "
            f"rejected credentials or failing); retry after {retry_after}s"
        )
    err.headers["Retry-After"] = retry_after
    err.headers["x-gateway-attempts"] = "0"
    return err
