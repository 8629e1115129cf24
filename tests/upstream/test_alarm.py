"""The actor's deadlines: Alarm (cancel the guarded task at a time) on one shared AlarmClock."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gateway.upstream.alarm import Alarm
from gateway.upstream.alarm import AlarmClock


async def _guarded_sleep(alarm: Alarm, when: float, sleep_s: float) -> str:
    """Sleep under `alarm`; returns how the wait ended, like the actor's waits do."""
    alarm.arm(when)
    try:
        await asyncio.sleep(sleep_s)
    except asyncio.CancelledError:
        if alarm.expired():
            return "timeout"
        raise
    finally:
        alarm.disarm()
    return "done"


async def test_fires_at_its_deadline_and_not_before() -> None:
    loop = asyncio.get_running_loop()
    clock = AlarmClock()
    started = loop.time()
    assert await _guarded_sleep(Alarm(clock), started + 0.05, 5) == "timeout"
    took = loop.time() - started
    assert 0.045 <= took < 0.5, took
    task = asyncio.current_task()
    assert task is not None
    assert task.cancelling() == 0
    assert len(clock) == 0


async def test_a_disarmed_alarm_never_fires() -> None:
    loop = asyncio.get_running_loop()
    clock = AlarmClock()
    alarm = Alarm(clock)
    assert await _guarded_sleep(alarm, loop.time() + 0.05, 0.01) == "done"
    await asyncio.sleep(0.1)  # past the deadline: nothing cancels this task
    assert len(clock) == 0


async def test_someone_elses_cancellation_is_reraised() -> None:
    loop = asyncio.get_running_loop()
    clock = AlarmClock()
    task = asyncio.create_task(_guarded_sleep(Alarm(clock), loop.time() + 5, 5))
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(clock) == 0


async def test_a_cancellation_arriving_with_the_fire_wins() -> None:
    loop = asyncio.get_running_loop()
    clock = AlarmClock()
    alarm = Alarm(clock)
    task = asyncio.create_task(_guarded_sleep(alarm, loop.time() + 0.02, 5))
    await asyncio.sleep(0)  # the task armed its alarm and sleeps
    assert alarm.seq
    alarm.fire()  # the deadline passed ...
    task.cancel()  # ... and the client left in the same loop iteration
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_fire_nobody_took_is_taken_back_on_disarm() -> None:
    """The guarded wait ended by itself as the alarm fired: the cancellation count goes
    back to what it was (the pending cancel itself is asyncio's to deliver, as with
    `asyncio.timeout`)."""
    clock = AlarmClock()
    alarm = Alarm(clock)
    loop = asyncio.get_running_loop()
    counts: list[tuple[int, int]] = []

    async def guarded() -> None:
        task = asyncio.current_task()
        assert task is not None
        alarm.arm(loop.time() + 5)
        alarm.fire()
        fired = task.cancelling()
        alarm.disarm()  # the wait ended without awaiting anything
        counts.append((fired, task.cancelling()))

    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.create_task(guarded())
    assert counts == [(1, 0)]
    assert len(clock) == 0


async def test_deadlines_fire_in_their_order_whatever_the_order_they_were_armed_in() -> None:
    loop = asyncio.get_running_loop()
    clock = AlarmClock()
    now = loop.time()
    ended: list[str] = []

    async def wait(name: str, after_s: float) -> None:
        ended.append(name + ":" + await _guarded_sleep(Alarm(clock), now + after_s, 5))

    # the later deadline first: the clock's one timer must move earlier for the second
    tasks = [asyncio.create_task(wait("late", 0.12)), asyncio.create_task(wait("early", 0.03))]
    await asyncio.gather(*tasks)
    assert ended == ["early:timeout", "late:timeout"]
    assert len(clock) == 0


async def test_dead_entries_do_not_pile_up() -> None:
    loop = asyncio.get_running_loop()
    clock = AlarmClock()
    alarm = Alarm(clock)
    for _ in range(5000):
        alarm.arm(loop.time() + 600)  # far deadlines: never reach the top in this test
        alarm.disarm()
    assert len(clock._heap) < 1100
    assert len(clock) == 0
    # re-arming without a disarm replaces the deadline
    alarm.arm(loop.time() + 600)
    alarm.arm(loop.time() + 0.01)
    with pytest.raises(asyncio.CancelledError):
        await asyncio.sleep(1)
    assert alarm.expired()
    alarm.disarm()
