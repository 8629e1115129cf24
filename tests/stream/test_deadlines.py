"""The read loop's deadlines, as arithmetic: which one wakes the actor, and what it means."""

from __future__ import annotations

import pytest

from gateway.config import Timeouts
from gateway.errors import UpstreamTimeout
from gateway.stream.deadlines import Deadlines

T = Timeouts(connect_s=1, first_byte_s=10, idle_s=5, total_s=100)


def make(deliver: bool = True, request_deadline: float = 1000.0) -> Deadlines:
    return Deadlines(
        opened=0.0,
        timeouts=T,
        request_deadline=request_deadline,
        commit_at=2.0,
        keepalive_s=3.0,
        deliver=deliver,
    )


def test_before_the_first_byte() -> None:
    d = make()
    assert d.next_wake(committed=False) == 2.0  # the commit point comes first
    assert d.due(2.0, committed=False) == "commit"
    assert d.next_wake(committed=True) == 3.0  # then keep-alive
    with pytest.raises(UpstreamTimeout) as err:
        d.due(10.0, committed=True)
    assert err.value.code == "first_byte_timeout"


def test_idle_moves_with_progress() -> None:
    d = make(deliver=False)
    d.got_bytes, d.last_upstream = True, 50.0
    assert d.next_wake(committed=False) == 55.0
    assert d.due(54.9, committed=False) is None  # a lazy wake-up with nothing due
    with pytest.raises(UpstreamTimeout) as err:
        d.due(55.0, committed=False)
    assert err.value.code == "idle_timeout"


def test_keepalive_does_not_count_as_progress() -> None:
    d = make()
    d.got_bytes, d.last_upstream, d.last_write = True, 10.0, 10.0
    assert d.due(13.0, committed=True) == "keepalive"
    d.last_write = 13.0  # the keep-alive was written; last_upstream did not move
    assert d.next_wake(committed=True) == 15.0
    with pytest.raises(UpstreamTimeout):
        d.due(15.0, committed=True)


def test_total_and_request_deadline() -> None:
    d = make(request_deadline=40.0)
    d.got_bytes, d.last_upstream, d.last_write = True, 39.0, 39.0
    assert d.next_wake(committed=True) == 40.0
    with pytest.raises(UpstreamTimeout, match="total deadline"):
        d.due(40.0, committed=True)
