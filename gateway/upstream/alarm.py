"""Deadlines that cancel the task they guard: the actor's timeouts, cheaper than
`asyncio.timeout`.

`asyncio.timeout_at` builds a context manager, a Timeout object and an event-loop timer on
every entry, and uvloop's timers are costly to make and cancel (a libuv handle each, ~4 µs).
The actor waits under a deadline at least once per request, so it keeps one `Alarm`, and
every alarm of a process shares one `AlarmClock`: a heap of deadlines under one loop timer,
armed at the earliest. Arming an alarm is a heap push; disarming marks the entry dead (dead
entries are dropped when they reach the top, or all at once when they pile up). The loop
timer is remade only when a deadline comes before every other one.

The waiter decides which error a fired alarm becomes (the phase it was in: first byte,
idle, total), so each timeout keeps its own code. Usage, the semantics of `asyncio.timeout`:

    alarm.arm(when)
    try:
        ...  # awaits
    except asyncio.CancelledError:
        if alarm.expired():
            raise UpstreamTimeout(...) from None
        raise  # somebody else's cancellation (a client that left, shutdown)
    finally:
        alarm.disarm()

When it fires, the alarm cancels its task; `expired()` takes that cancellation back and says
whether it was the only one: a cancellation from anyone else that arrived too wins.
"""

from __future__ import annotations

import asyncio
from heapq import heapify
from heapq import heappop
from heapq import heappush

_current_task = asyncio.current_task
# uvloop's clock counts milliseconds: a timer may run up to 1 ms before the time it was
# set for, and a deadline that close is due (asyncio's own loop allows the same).
_RESOLUTION_S = 0.001
_COMPACT_AT = 512  # dead entries kept at most (beyond half the heap) before a rebuild


class AlarmClock:
    """The one loop timer behind every `Alarm` of an event loop (kept by the HttpPool, so
    one per worker process)."""

    __slots__ = ("_at", "_dead", "_handle", "_heap", "_loop", "_seq")

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._heap: list[tuple[float, int, Alarm]] = []
        self._handle: asyncio.TimerHandle | None = None
        self._at = float("inf")  # when the loop timer fires
        self._seq = 0
        self._dead = 0

    def _add(self, when: float, alarm: Alarm) -> int:
        self._seq = seq = self._seq + 1
        heappush(self._heap, (when, seq, alarm))
        if when < self._at:
            self._set_timer(when)
        return seq

    def _dropped(self) -> None:
        """An entry died (its alarm was disarmed or re-armed)."""
        self._dead = dead = self._dead + 1
        heap = self._heap
        if dead > _COMPACT_AT and dead * 2 > len(heap):
            heap[:] = [entry for entry in heap if entry[2].seq == entry[1]]
            heapify(heap)
            self._dead = 0

    def _set_timer(self, when: float) -> None:
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        if self._handle is not None:
            self._handle.cancel()
        self._at = when
        self._handle = loop.call_at(when, self._tick)

    def _tick(self) -> None:
        self._handle = None
        self._at = float("inf")
        assert self._loop is not None
        due = self._loop.time() + _RESOLUTION_S
        heap = self._heap
        while heap:
            when, seq, alarm = heap[0]
            if alarm.seq != seq:
                heappop(heap)
                self._dead -= 1
            elif when <= due:
                heappop(heap)
                alarm.fire()
            else:
                self._set_timer(when)
                return

    def __len__(self) -> int:
        """Live deadlines (for tests: none may outlive its request)."""
        return sum(1 for _, seq, alarm in self._heap if alarm.seq == seq)


class Alarm:
    """One deadline at a time for the task that arms it (the actor's own)."""

    __slots__ = ("_cancelling", "_clock", "_fired", "_task", "seq")

    def __init__(self, clock: AlarmClock) -> None:
        self._clock = clock
        self._task: asyncio.Task[object] | None = None
        self._fired = False
        self._cancelling = 0
        self.seq = 0  # the clock's entry while armed, else 0

    def arm(self, when: float) -> None:
        """Cancel the current task at loop time `when` unless disarmed first."""
        task = _current_task()
        assert task is not None, "an Alarm guards a task"
        if self.seq:
            self._clock._dropped()
        self._task = task
        self._cancelling = task.cancelling()
        self._fired = False
        self.seq = self._clock._add(when, self)

    def disarm(self) -> None:
        """The guarded wait is over. A fire whose cancellation nobody took (the wait ended
        anyway) is taken back here, as `asyncio.timeout` does."""
        if self.seq:
            self.seq = 0
            self._clock._dropped()
        elif self._fired:
            self._fired = False
            assert self._task is not None
            self._task.uncancel()
        self._task = None  # a dead entry waits in the clock's heap: it must not keep the task

    def expired(self) -> bool:
        """Called on a CancelledError: whether it is this alarm's alone (then the caller
        raises its timeout error instead)."""
        if not self._fired:
            return False
        self._fired = False
        assert self._task is not None
        return self._task.uncancel() <= self._cancelling

    def fire(self) -> None:
        """The deadline passed (called by the clock)."""
        self.seq = 0
        self._fired = True
        assert self._task is not None
        self._task.cancel()
