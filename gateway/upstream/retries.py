"""Same-target retries (docs/routing.md, "Retries on the same target"): a transient failure
(a 5xx, a connection reset or hang-up, a 429) may be tried again on the same target, at most
`routing.retries_per_target` times, before the plan moves on.

- 5xx and connection failures: after a jittered backoff (BACKOFF_S, 0.5x to 1.5x).
- 429 (or a 5xx) with a Retry-After: waited out when it is at most `routing.max_retry_wait_s`
  and no later attempt of the plan (another key or target) may start now, since that one is
  sooner; a longer or unknown wait moves on at once.

The wait never runs past the request's deadline (the caller checks). Sans-IO: the caller
sleeps.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from gateway.errors import UpstreamError
from gateway.routing.router import Attempt

BACKOFF_S = 0.2
_jitter = random.Random()


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    per_target: int = 0
    max_wait_s: float = 5.0

    @classmethod
    def of(cls, routing: Any) -> RetryPolicy:
        return cls(per_target=routing.retries_per_target, max_wait_s=routing.max_retry_wait_s)


NO_RETRIES = RetryPolicy()


def transient(err: UpstreamError) -> bool:
    """A failure the same target may not repeat: a 5xx, a 429, a connection reset or hang-up,
    an error event its adapter calls transient (an overload, an internal error)."""
    if err.transient is not None:
        return err.transient
    status = err.upstream_status
    return status is not None and (status == 429 or status >= 500)


def retry_wait(
    policy: RetryPolicy,
    err: UpstreamError,
    attempt: Attempt,
    later: Sequence[Attempt],
    retried: dict[tuple[str, str], int],
) -> float | None:
    """Seconds to wait before trying `attempt` again, or None: move on. Counts the retry."""
    target = (attempt.provider.name, attempt.model)
    if retried.get(target, 0) >= policy.per_target or not err.retryable or not transient(err):
        return None
    after = err.retry_after_s
    if after is not None or err.upstream_status == 429:
        if after is None or after > policy.max_wait_s:
            return None  # a wait not known, or too long: the next attempt
        now = time.monotonic()
        if any(a.health.wait_s(now, a.model) <= 0 for a in later):
            return None  # another key or target may start now: sooner
        wait = after + _jitter.uniform(0.0, 0.05)
    else:
        wait = BACKOFF_S * _jitter.uniform(0.5, 1.5)
    retried[target] = retried.get(target, 0) + 1
    return wait
