"""The deadlines of one upstream read loop, as arithmetic on times passed in (sans-IO).

First byte, idle, total and the request's own deadline end the attempt; the commit point and
the keep-alive interval make the actor write. The actor arms one timer at `next_wake()` and,
when it fires, asks `due()` what really passed: the idle deadline moves on every read, so the
timer is lazy and re-armed instead of rescheduled per read.
"""

from __future__ import annotations

from typing import Literal

from gateway.config import Timeouts
from gateway.errors import UpstreamTimeout

Due = Literal["commit", "keepalive"] | None


class Deadlines:
    __slots__ = (
        "_commit_at",
        "_end",
        "_first_byte_at",
        "_idle_s",
        "_keepalive_s",
        "_timeouts",
        "deliver",
        "got_bytes",
        "last_upstream",
        "last_write",
    )

    def __init__(
        self,
        *,
        opened: float,
        timeouts: Timeouts,
        request_deadline: float,
        commit_at: float,
        keepalive_s: float,
        deliver: bool,
    ) -> None:
        self._timeouts = timeouts
        self._end = min(opened + timeouts.total_s, request_deadline)
        self._first_byte_at = opened + timeouts.first_byte_s
        self._idle_s = timeouts.idle_s
        self._commit_at = commit_at
        self._keepalive_s = keepalive_s
        self.deliver = deliver  # False: nothing is written (a non-streaming client)
        self.got_bytes = False
        self.last_upstream = opened  # last upstream byte, or last completed client write
        self.last_write = opened  # last write of any kind to the client

    def next_wake(self, committed: bool) -> float:
        wake = self._end
        if self.got_bytes:
            wake = min(wake, self.last_upstream + self._idle_s)
        else:
            wake = min(wake, self._first_byte_at)
        if self.deliver:
            if committed:
                wake = min(wake, self.last_write + self._keepalive_s)
            else:
                wake = min(wake, self._commit_at)
        return wake

    def due(self, now: float, committed: bool) -> Due:
        """What passed at `now`: raises for the deadlines that end the attempt."""
        t = self._timeouts
        if now >= self._end:
            raise UpstreamTimeout("the upstream stream ran past its total deadline")
        if not self.got_bytes and now >= self._first_byte_at:
            raise UpstreamTimeout(
                f"no byte from the upstream within {t.first_byte_s:g}s", code="first_byte_timeout"
            )
        if self.got_bytes and now >= self.last_upstream + self._idle_s:
            raise UpstreamTimeout(
                f"the upstream was silent for over {t.idle_s:g}s", code="idle_timeout"
            )
        if not self.deliver:
            return None
        if not committed and now >= self._commit_at:
            return "commit"
        if committed and now >= self.last_write + self._keepalive_s:
            return "keepalive"
        return None
