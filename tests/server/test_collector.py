"""The serving process's collector set-up (gateway/server/collector.py)."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from gateway.server.collector import THRESHOLDS
from gateway.server.collector import tune_collector


@pytest.fixture
def restored_collector() -> Iterator[None]:
    before = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*before)


@pytest.mark.usefixtures("restored_collector")
def test_startup_objects_are_frozen_and_thresholds_raised() -> None:
    gc.unfreeze()
    tune_collector()
    assert gc.get_threshold() == THRESHOLDS
    assert gc.get_freeze_count() > 1000  # the modules and tables of start-up


@pytest.mark.usefixtures("restored_collector")
def test_cycles_made_after_start_are_still_collected() -> None:
    tune_collector()

    class Node:
        other: Node

    a, b = Node(), Node()
    a.other, b.other = b, a
    seen = gc.get_objects()
    assert any(o is a for o in seen)  # tracked, not frozen
    del a, b, seen
    assert gc.collect() >= 2
