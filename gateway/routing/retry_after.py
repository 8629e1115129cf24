"""How long an upstream asked us to wait, read from its response headers (sans-IO).

The forms, in the order they are believed (the first one present and readable wins):

    retry-after-ms     milliseconds (OpenAI's SDKs honour it first too)
    retry-after        seconds, or an HTTP date (RFC 9110)
    reset families     what the provider's adapter declares (`ResetHeaders`, its
                       `rate_limits`): a remaining count and a reset per limit, the reset
                       as a Go-style duration ("1s", "6m0s", "20ms") or an RFC 3339 time

For the reset families, the limits that are spent (`...-remaining` is 0) say how long; when
none is known to be spent the soonest reset is taken. The wall clock `now` is passed in.
Values are clamped to [0, MAX_WAIT_S]: a broken header must not bench a key for a day.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

from gateway.providers.base import ResetHeaders

MAX_WAIT_S = 3600.0

_GO_DURATION = re.compile(r"(?:(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns))")
_GO_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}


def retry_after_s(
    headers: Mapping[str, str], now: float, families: tuple[ResetHeaders, ...] = ()
) -> float | None:
    """Seconds to wait before this key is asked again, or None when the answer does not say.
    `headers` have lower-case names; `now` is the wall clock (unix seconds); `families` the
    provider's rate-limit headers."""
    waits = [
        _milliseconds(headers.get("retry-after-ms")),
        _retry_after(headers.get("retry-after"), now),
    ]
    waits += [_resets(headers, family, now) for family in families]
    for wait in waits:
        if wait is not None:
            return min(max(wait, 0.0), MAX_WAIT_S)
    return None


def _number(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        number = float(value.strip())
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _milliseconds(value: str | None) -> float | None:
    number = _number(value)
    return None if number is None else number / 1000.0


def _retry_after(value: str | None, now: float) -> float | None:
    if value is None:
        return None
    number = _number(value)
    if number is not None:
        return number
    try:
        when = parsedate_to_datetime(value.strip())
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # RFC 9110 dates are GMT
        return None
    return when.timestamp() - now


def go_duration_s(value: str) -> float | None:
    """A Go `time.Duration` string ("1s", "6m0s", "1h2m3.5s", "20ms") in seconds; a bare
    number is taken as seconds. None when it is neither."""
    text = value.strip()
    bare = _number(text)
    if bare is not None:
        return bare
    total, at = 0.0, 0
    for match in _GO_DURATION.finditer(text):
        if match.start() != at:
            return None
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        at = match.end()
    return total if at == len(text) and at > 0 else None


def _rfc3339_s(value: str, now: float) -> float | None:
    text = value.strip().replace("Z", "+00:00").replace("z", "+00:00")
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        return None
    return when.timestamp() - now


def _resets(headers: Mapping[str, str], family: ResetHeaders, now: float) -> float | None:
    spent: list[float] = []
    other: list[float] = []
    for limit in family.limits:
        raw = headers.get(family.reset.format(limit))
        if raw is None:
            continue
        wait = go_duration_s(raw) if family.form == "duration" else _rfc3339_s(raw, now)
        if wait is None:
            continue
        remaining = _number(headers.get(family.remaining.format(limit)))
        (spent if remaining is not None and remaining <= 0 else other).append(wait)
    if spent:
        return max(spent)
    return min(other) if other else None
