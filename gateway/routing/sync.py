"""Key health shared by the processes of one store (sqlite: one machine; redis: replicas).

When a key becomes unavailable here (a 429 cooldown, an auth hold, an open circuit) the end
of that hold is written to the store as wall-clock time, with the remaining time as TTL:

    health:<provider>:<fingerprint>            key-level hold (auth_failed, circuit_open)
    health:<provider>:<fingerprint>:<model>    a rate-limit cooldown of one upstream model

A recovery (a half-open probe that succeeded) deletes the key-level entry. Writes are
fire-and-forget from the request's point of view, but every write task is kept and a store
error is logged as a warning. Every PULL_INTERVAL_S a background task reads the entries of
the configured keys (and, for cooldowns, of the upstream models configured targets use) and
mirrors them into each KeyHealth: bounded work whatever the traffic. Cooldowns of models
addressed only as `provider/model` stay local. Half-open probes are per process: when a
shared hold ends, each process sends its own first request. `memory://` is one process:
nothing is shared or polled.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from collections.abc import Callable

import msgspec
from aiohttp import web

from gateway.routing.health import RATE_LIMITED
from gateway.routing.health import RECOVERED
from gateway.routing.health import KeyHealth
from gateway.routing.router import Router
from gateway.store.kv import KeyValueStore
from gateway.store.kv import StoreError

log = logging.getLogger("gateway.routing")
PULL_INTERVAL_S = 0.5
STOP_WAIT_S = 2.0


class SharedHold(msgspec.Struct, frozen=True):
    until: float  # wall clock, unix seconds
    reason: str


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(SharedHold).decode


class HealthSync:
    def __init__(self, kv: KeyValueStore, router: Router) -> None:
        self._kv = kv
        self._entries: list[tuple[KeyHealth, tuple[str, ...]]] = []
        self.follow(router)
        self._writes: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    def follow(self, router: Router) -> None:
        """Mirror the keys and models of `router` from the next round on (a reloaded config:
        gateway/server/reload.py)."""
        self._entries = [
            (slot.health, tuple(sorted(router.provider_models(provider))))
            for provider, slots in router.slots.items()
            for slot in slots
        ]

    # --- writing -----------------------------------------------------------------------------

    def publish(self, health: KeyHealth, reason: str, until: float, model: str | None) -> None:
        key = health.store_key if model is None else f"{health.store_key}:{model}"
        if reason == RECOVERED:
            value, ttl = b"", 0.0
        else:
            ttl = until - time.monotonic()
            if ttl <= 0:
                return
            value = _encode(SharedHold(until=time.time() + ttl, reason=reason))
        task = asyncio.get_running_loop().create_task(self._put(key, value, ttl), name=key)
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _put(self, key: str, value: bytes, ttl: float) -> None:
        try:
            await self._kv.put(key, value, ttl)
        except StoreError as exc:
            log.warning("key health not shared: store write of %s failed: %s", key, exc)

    # --- reading -----------------------------------------------------------------------------

    async def pull(self) -> None:
        """Mirror the store's holds into every configured key's health."""
        for health, models in self._entries:
            wall, mono = time.time(), time.monotonic()
            hold = await self._read(health.store_key, wall)
            until = mono + (hold.until - wall) if hold is not None else 0.0
            cooling: dict[str, float] = {}
            for model in models:
                cooled = await self._read(f"{health.store_key}:{model}", wall)
                if cooled is not None and cooled.reason == RATE_LIMITED:
                    cooling[model] = mono + (cooled.until - wall)
            health.mirror(until, hold.reason if hold is not None else "", cooling)

    async def _read(self, key: str, wall: float) -> SharedHold | None:
        raw = await self._kv.get(key)
        if not raw:
            return None
        try:
            hold = _decode(raw)
        except msgspec.DecodeError:
            log.warning("key health: ignoring a malformed store entry %s", key)
            return None
        return hold if hold.until > wall else None

    async def _run(self) -> None:
        failing = False
        while not self._stopping:
            await asyncio.sleep(PULL_INTERVAL_S)
            try:
                await self.pull()
            except StoreError as exc:
                if not failing:  # once per outage, not twice a second
                    log.warning("key health: store read failed, local state only: %s", exc)
                failing = True
            else:
                failing = False

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._stopping = False
        self._task = asyncio.get_running_loop().create_task(self._run(), name="health-sync")

    async def stop(self) -> None:
        # The flag as well as the cancel: redis-py's asyncio client can swallow a
        # cancellation that lands inside a command (seen with 8.1), and awaiting the task
        # then never returned, so a gateway drained and never exited. The loop checks the
        # flag each round, and the wait is bounded either way.
        self._stopping = True
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=STOP_WAIT_S)
            if not done:
                log.warning("key health: the sync task did not stop in %gs", STOP_WAIT_S)
            elif not task.cancelled() and task.exception() is not None:
                log.warning("key health: the sync task failed: %r", task.exception())
        await self.flush()

    async def flush(self) -> None:
        """Wait (bounded) for the writes in flight."""
        if self._writes:
            await asyncio.wait(set(self._writes), timeout=STOP_WAIT_S)


def health_sync(
    router: Router, kv: KeyValueStore, store_url: str
) -> Callable[[web.Application], AsyncIterator[None]]:
    """An aiohttp cleanup context running the sync for the app's lifetime (not for memory://)."""

    async def run(app: web.Application) -> AsyncIterator[None]:
        if store_url.startswith("memory:"):
            yield
            return
        sync = HealthSync(kv, router)
        router.events.publisher = sync
        sync.start()
        try:
            yield
        finally:
            router.events.publisher = None
            await sync.stop()

    return run
