"""What the client is told when every attempt failed before the commit point.

429 if every attempt was rate limited, 504 if the last failure was a timeout, the
upstream's own 4xx (message, type, param, code) when it refused the request itself, and
502 otherwise. (503, nothing could be tried, is raised by the actor directly.)
"""

from __future__ import annotations

from gateway.errors import GatewayError, UpstreamError, UpstreamTimeout


def final_error(errors: list[UpstreamError]) -> GatewayError:
    last = errors[-1]
    if all(e.upstream_status == 429 for e in errors):
        err = UpstreamError(
            f"every upstream attempt was rate limited ({len(errors)} tried): {last.message}",
            code="rate_limit_exceeded",
        )
        err.status, err.type = 429, "rate_limit_error"
        return err
    if isinstance(last, UpstreamTimeout):
        return last
    status = last.upstream_status
    if not last.retryable and status is not None and 400 <= status < 500:
        last.status = status
        return last
    last.status = 502
    return last
