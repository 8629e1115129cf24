"""HealthSync: holds written by one process reach another through one sqlite file."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from pathlib import Path

import pytest

from gateway.config import parse_config
from gateway.providers.registry import make_adapter
from gateway.routing.health import KeyHealth
from gateway.routing.router import Router
from gateway.routing.sync import HealthSync
from gateway.store.kv import MemoryKV
from gateway.store.kv import StoreUnavailable
from gateway.store.sqlite_kv import SqliteKV

CONFIG = """
routing: {circuit_failures: 1}
providers:
  - name: up
    kind: openai
    base_url: http://up.test/v1
    keys: [{key: k-1}, {key: k-2}]
models:
  - name: smart
    targets: [{provider: up, model: m}]
"""


def router() -> Router:
    cfg = parse_config(CONFIG, env={})
    return Router(cfg, {p.name: make_adapter(p) for p in cfg.providers}, rng=random.Random(0))


def first_key(r: Router) -> KeyHealth:
    return r.slots["up"][0].health


async def settle(sync: HealthSync) -> None:
    await asyncio.sleep(0)
    await sync.flush()


async def test_a_cooldown_and_a_circuit_reach_the_other_process(tmp_path: Path) -> None:
    path = str(tmp_path / "gw.db")
    kv_a, kv_b = SqliteKV(path), SqliteKV(path)
    a, b = router(), router()
    sync_a, sync_b = HealthSync(kv_a, a), HealthSync(kv_b, b)
    a.events.publisher = sync_a
    try:
        h = first_key(a)
        now = time.monotonic()
        h.rate_limited(h.begin(now, "m"), now, "m", 20.0)
        await settle(sync_a)
        await sync_b.pull()
        other = first_key(b)
        wait, rate_only = other.refusal(time.monotonic(), "m")
        assert 18.0 < wait <= 20.0
        assert rate_only
        assert other.wait_s(time.monotonic(), "not-configured") == 0
        assert b.slots["up"][1].health.clear  # the other key is untouched

        h.server_failed(h.begin(now, "x"), now)  # circuit_failures: 1
        await settle(sync_a)
        await sync_b.pull()
        assert other.state(time.monotonic()) == "circuit_open"
        assert not other.refusal(time.monotonic(), "other")[1]

        # a recovery deletes the key-level entry: the other process lets the key go at once
        probe = h.begin(now + 100, "m2")
        h.succeeded(probe, 0.1, 0, now + 100)
        await settle(sync_a)
        await sync_b.pull()
        assert other.state(time.monotonic()) == "healthy"
    finally:
        await sync_a.stop()
        await kv_a.close()
        await kv_b.close()


class DeadStore:
    async def get(self, key: str) -> bytes | None:
        raise StoreUnavailable("down")

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        raise StoreUnavailable("down")

    async def ping(self) -> bool:
        return False

    async def close(self) -> None:
        return None


async def test_store_errors_are_logged_never_lost_silently(
    caplog: pytest.LogCaptureFixture,
) -> None:
    r = router()
    sync = HealthSync(DeadStore(), r)
    r.events.publisher = sync
    h = first_key(r)
    now = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="gateway.routing"):
        h.rate_limited(h.begin(now, "m"), now, "m", 5.0)
        await settle(sync)
    assert any("store write" in rec.getMessage() for rec in caplog.records)
    assert h.wait_s(now, "m") == 5.0  # the local state holds regardless
    with pytest.raises(StoreUnavailable):
        await sync.pull()


async def test_the_background_task_pulls_and_stops(tmp_path: Path) -> None:
    kv = SqliteKV(str(tmp_path / "gw.db"))
    a, b = router(), router()
    sync_a, sync_b = HealthSync(kv, a), HealthSync(kv, b)
    a.events.publisher = sync_a
    sync_b.start()
    try:
        h = first_key(a)
        now = time.monotonic()
        h.auth_failed(h.begin(now, "m"), now)
        await asyncio.sleep(0.05)  # the write
        await asyncio.sleep(0.6)  # one pull interval later, without calling pull()
        assert first_key(b).state(time.monotonic()) == "auth_failed"
    finally:
        await sync_b.stop()
        await sync_a.stop()
        await kv.close()
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "health-sync"]


class SwallowingStore(MemoryKV):
    """A store whose reads swallow a cancellation, as redis-py's asyncio client sometimes
    does when it lands inside a command."""

    def __init__(self) -> None:
        super().__init__()
        self.reading = asyncio.Event()

    async def get(self, key: str) -> bytes | None:
        self.reading.set()
        with contextlib.suppress(asyncio.CancelledError):  # the cancel is lost
            await asyncio.sleep(0.3)
        return None


async def test_stop_returns_even_when_the_store_swallows_the_cancellation() -> None:
    store = SwallowingStore()
    sync = HealthSync(store, router())
    sync.start()
    await asyncio.wait_for(store.reading.wait(), 5)  # the task is inside a read now
    started = time.monotonic()
    await asyncio.wait_for(sync.stop(), 5)
    assert time.monotonic() - started < 3
