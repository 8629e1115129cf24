"""The config section of the operator console (`console`, docs/console.md).

The console is on whenever `auth.master_key` is set, unless `enabled: false`. The section
changes only with a restart (gateway/server/reload.py): its routes and its sampler are set
up with the process. The session length is read at each sign-in.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import msgspec

from gateway.config_parse import Problem

SESSION_TTL_RANGE = (60.0, 604_800.0)  # a minute .. a week
OVERVIEW_INTERVAL_RANGE = (1.0, 60.0)


class ConsoleConfig(msgspec.Struct, forbid_unknown_fields=True, kw_only=True, frozen=True):
    """The web console at /ui/ (docs/console.md)."""

    enabled: bool = True  # with auth.master_key set; false: every /ui/ path answers 404
    session_ttl_s: float = 28_800.0  # a session lasts this long from its sign-in
    overview_interval_s: float = 10.0  # how often the overview samples the metrics


def console_problems(console: ConsoleConfig) -> Iterator[Problem]:
    here = ("console",)
    low, high = SESSION_TTL_RANGE
    if not (math.isfinite(console.session_ttl_s) and low <= console.session_ttl_s <= high):
        yield (*here, "session_ttl_s"), f"must be from {low:g} to {high:g} seconds"
    low, high = OVERVIEW_INTERVAL_RANGE
    interval = console.overview_interval_s
    if not (math.isfinite(interval) and low <= interval <= high):
        yield (*here, "overview_interval_s"), f"must be from {low:g} to {high:g} seconds"
