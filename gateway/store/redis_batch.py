"""The redis accounting store's commands, sent per loop turn: one pipeline per server.

Every command a process's ledger sends (admissions, settles, releases, key lookups, the
admin API's reads) joins the queue of the server that owns its key (a single server has
one; a cluster one per primary, found from the key's slot). Once per turn of the event loop
each queue with calls goes out as one pipeline (not a transaction: each command or script is
atomic on its own, and they run in arrival order): one write, one read of the replies, on a
connection of that server's own. While MAX_IN_FLIGHT pipelines of one server wait for their
replies, calls queue for the next: under load a round trip serves many requests.

redis-py's Pipeline (and ClusterPipeline) are not used here: their per-command bookkeeping
was most of what a store call cost the gateway, and a ClusterPipeline fails (and closes) the
whole batch when one shard is down. redis-py still provides the connections, the reply
parser (hiredis), and for a cluster the slot map (`RedisCluster.nodes_manager`).

Failures, per server: a connection that breaks before any reply came, when it was an idle
pooled one (the server restarted meanwhile), is tried again once on a new connection: no
command of it can have run, since the server that got it is gone. Otherwise every call
without its reply fails with StoreUnavailable; calls whose replies arrived keep them. A
script the server does not know (NOSCRIPT: restarted, flushed) is loaded and its calls sent
again. A cluster's redirection (MOVED, ASK, TRYAGAIN) refreshes the slot map and sends the
call again, at most REDIRECTS times; a connection error refreshes the slot map in the
background (at most once a second), so that a failover to a replica is found.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any
from typing import cast

import hiredis
from redis.asyncio import RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.connection import ConnectionPool
from redis.crc import key_slot
from redis.exceptions import AskError
from redis.exceptions import ConnectionError
from redis.exceptions import NoScriptError
from redis.exceptions import RedisError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.exceptions import TryAgainError

from gateway.store.kv import StoreUnavailable
from gateway.store.redis_conn import COMMAND_TIMEOUT_S
from gateway.store.redis_conn import MAX_CONNECTIONS
from gateway.store.redis_conn import cluster_client
from gateway.store.redis_conn import connection_options
from gateway.store.redis_url import is_cluster_url
from gateway.store.redis_url import redacted

MAX_IN_FLIGHT = MAX_CONNECTIONS  # pipelines per server waiting for their replies
REDIRECTS = 3
REFRESH_EVERY_S = 1.0
TRY_AGAIN_S = 0.05
SINGLE = "single"  # the lane name of a single server


class _Call:
    __slots__ = ("command", "future", "redirects", "route")

    def __init__(self, route: str, command: bytes, future: asyncio.Future[Any]) -> None:
        self.route = route
        self.command = command
        self.future = future
        self.redirects = 0


class _Broken(Exception):
    """The connection failed after `replies` of the pipeline's replies were read."""

    def __init__(self, cause: RedisError | OSError, replies: list[Any]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.replies = replies


class _Lane:
    """One server's queue and connections."""

    def __init__(self, make: Callable[[], AbstractConnection]) -> None:
        self.make = make
        self.idle: list[AbstractConnection] = []
        self.every: list[AbstractConnection] = []
        self.queued: list[_Call] = []
        self.in_flight = 0

    def connection(self) -> AbstractConnection:
        if self.idle:
            return self.idle.pop()
        conn = self.make()
        self.every.append(conn)
        return conn

    async def drop_idle(self) -> None:
        """After a broken connection, the idle ones are likely dead too (a restart)."""
        for conn in self.idle:
            await conn.disconnect(nowait=True)


class Batcher:
    def __init__(self, url: str, scripts: list[str]) -> None:
        self.where = redacted(url)
        self._scripts = {_pack(("SCRIPT", "LOAD", s)): s for s in scripts}
        self._lanes: dict[str, _Lane] = {}
        self._scheduled = False
        self._sending: set[asyncio.Task[None]] = set()
        self._cluster: RedisCluster | None = None
        self._slots: dict[str, int] = {}
        self._refreshed = 0.0
        self._refreshing: asyncio.Task[None] | None = None
        if is_cluster_url(url):
            self._cluster = cluster_client(url)
        else:
            pool = ConnectionPool.from_url(url, **connection_options())
            self._lanes[SINGLE] = _lane(pool.connection_class, pool.connection_kwargs)

    @property
    def cluster(self) -> bool:
        return self._cluster is not None

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        # redis-py's messages name the host and the server's reply, never the password.
        return StoreUnavailable(f"redis store {self.where}: {type(exc).__name__}: {exc}")

    async def call(self, route: str, *args: str | bytes | int | float) -> Any:
        """The reply to one command (`route`: a key it touches, which decides the shard)."""
        lane = self._lanes.get(SINGLE) or await self._lane_of(route)
        return await self._enqueue(lane, _Call(route, _pack(args), self._future()))

    async def call_on(self, server: str, *args: str | bytes | int | float) -> Any:
        """The reply to one command sent to `server` (one of `servers()`)."""
        lane = self._lanes[server]
        return await self._enqueue(lane, _Call("", _pack(args), self._future()))

    async def servers(self) -> list[str]:
        """Every primary (SCAN runs on each)."""
        if self._cluster is None:
            return [SINGLE]
        await self._topology()
        return [self._lane_named(node) for node in self._cluster.get_primaries()]

    async def close(self) -> None:
        if self._scheduled:
            self._flush()
        while self._sending:  # pipelines in flight are answered before the connections go
            await asyncio.wait(tuple(self._sending))
        if self._refreshing is not None:
            await asyncio.wait({self._refreshing})
        for lane in self._lanes.values():
            for conn in lane.every:
                await conn.disconnect()
        if self._cluster is not None:
            await self._cluster.aclose()

    # --- routing (a cluster) ------------------------------------------------------------------

    async def _topology(self) -> RedisCluster:
        assert self._cluster is not None
        try:
            await self._cluster.initialize()  # the slot map, once (a no-op after)
        except (RedisError, OSError) as exc:
            raise self.unavailable(exc) from exc
        return self._cluster

    async def _lane_of(self, route: str) -> _Lane:
        cluster = await self._topology()
        slot = self._slots.get(route)
        if slot is None:
            if len(self._slots) >= 100_000:
                self._slots.clear()
            slot = self._slots[route] = key_slot(route.encode())
        try:
            node = cluster.nodes_manager.get_node_from_slot(slot)
        except RedisError as exc:
            raise self.unavailable(exc) from exc
        return self._lanes[self._lane_named(node)]

    def _lane_named(self, node: Any) -> str:
        name: str = node.name
        if name not in self._lanes:
            self._lanes[name] = _lane(node.connection_class, node.connection_kwargs)
        return name

    def _refresh(self) -> None:
        """Read the slot map again, in the background, at most once a second."""
        now = time.monotonic()
        if self._cluster is None or self._refreshing is not None:
            return
        if now - self._refreshed < REFRESH_EVERY_S:
            return
        self._refreshed = now
        self._refreshing = asyncio.get_running_loop().create_task(self._reread())

    async def _reread(self) -> None:
        assert self._cluster is not None
        try:
            await self._cluster.nodes_manager.initialize()
        except (RedisError, OSError):
            pass  # every node down: the next call's error says so
        finally:
            self._refreshing = None

    # --- sending -----------------------------------------------------------------------------

    def _future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    async def _enqueue(self, lane: _Lane, call: _Call) -> Any:
        lane.queued.append(call)
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return await call.future

    def _flush(self) -> None:
        self._scheduled = False
        loop = asyncio.get_running_loop()
        for lane in self._lanes.values():
            if lane.queued and lane.in_flight < MAX_IN_FLIGHT:
                batch, lane.queued = lane.queued, []
                lane.in_flight += 1
                task = loop.create_task(self._send(lane, batch))
                self._sending.add(task)
                task.add_done_callback(self._sending.discard)

    async def _send(self, lane: _Lane, batch: list[_Call]) -> None:
        try:
            replies = await self._pipeline(lane, batch)
        except Exception as exc:  # a bug: every caller gets the error, none waits forever
            replies = [exc] * len(batch)
        except BaseException:  # cancelled (the process stops): no caller waits forever
            for call in batch:
                if not call.future.done():
                    call.future.cancel()
            raise
        finally:
            lane.in_flight -= 1
            if lane.queued and not self._scheduled:
                self._scheduled = True
                asyncio.get_running_loop().call_soon(self._flush)
        again: list[_Call] = []
        for call, reply in zip(batch, replies, strict=True):
            if call.future.done():
                continue  # its caller was cancelled
            if isinstance(reply, AskError | TryAgainError) and call.redirects < REDIRECTS:
                again.append(call)  # MovedError is an AskError
            elif isinstance(reply, RedisError | OSError):
                call.future.set_exception(self.unavailable(reply))
            elif isinstance(reply, Exception):
                call.future.set_exception(reply)
            else:
                call.future.set_result(reply)
        if again:
            await self._redirect(again)

    async def _redirect(self, calls: list[_Call]) -> None:
        assert self._cluster is not None
        await asyncio.sleep(TRY_AGAIN_S)
        try:
            await self._cluster.nodes_manager.initialize()
        except (RedisError, OSError) as exc:
            for call in calls:
                if not call.future.done():
                    call.future.set_exception(self.unavailable(exc))
            return
        for call in calls:
            call.redirects += 1
            try:
                lane = await self._lane_of(call.route)
            except StoreUnavailable as exc:
                call.future.set_exception(exc)
                continue
            task = asyncio.get_running_loop().create_task(self._enqueue(lane, call))
            task.add_done_callback(_consume)

    async def _pipeline(self, lane: _Lane, batch: list[_Call]) -> list[Any]:
        """The replies of `batch`, in order (an exception object in place of each one that
        failed), sent on one of the lane's connections."""
        conn = lane.connection()
        try:
            reused = conn.is_connected
            try:
                replies = await _exchange(conn, [c.command for c in batch])
            except _Broken as broken:
                if reused and not broken.replies and isinstance(broken.cause, ConnectionError):
                    await lane.drop_idle()
                    replies = await _exchange(conn, [c.command for c in batch])
                else:
                    raise
            lost = [i for i, r in enumerate(replies) if isinstance(r, NoScriptError)]
            if lost:
                await _exchange(conn, list(self._scripts))
                resent = await _exchange(conn, [batch[i].command for i in lost])
                for i, reply in zip(lost, resent, strict=True):
                    replies[i] = reply
            return replies
        except _Broken as broken:
            self._refresh()
            missing = len(batch) - len(broken.replies)
            return broken.replies + [broken.cause] * missing
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        finally:
            lane.idle.append(conn)


def _lane(kind: Any, options: dict[str, Any]) -> _Lane:
    """A lane whose connections have no timeout of their own: `_exchange` times the whole
    exchange at once. (redis-py's per-write timeout runs each write in a task of its own,
    which under load cost the gateway a turn of its busy event loop per round trip.)"""
    untimed = {**options, "socket_timeout": None}
    return _Lane(lambda: kind(**untimed))


async def _exchange(conn: AbstractConnection, commands: list[bytes]) -> list[Any]:
    """One write of `commands` and the read of their replies (an error reply in place),
    in COMMAND_TIMEOUT_S at most."""
    replies: list[Any] = []
    try:
        async with asyncio.timeout(COMMAND_TIMEOUT_S):
            await conn.send_packed_command(b"".join(commands), check_health=False)
            for _ in commands:
                try:
                    replies.append(await conn.read_response(disable_decoding=True))
                except ResponseError as exc:
                    replies.append(exc)
    except TimeoutError as exc:  # asyncio's: the server did not answer in time
        await conn.disconnect(nowait=True)
        late = RedisTimeoutError(f"no answer in {COMMAND_TIMEOUT_S:g}s")
        raise _Broken(late, replies) from exc
    except (RedisError, OSError) as exc:
        await conn.disconnect(nowait=True)
        raise _Broken(exc, replies) from exc
    return replies


def _pack(args: tuple[str | bytes | int | float, ...]) -> bytes:
    """One command in the redis protocol (hiredis, in C; its stubs type the argument as a
    tuple of one)."""
    packed: bytes = hiredis.pack_command(cast("Any", args))
    return packed


def _consume(task: asyncio.Task[Any]) -> None:
    """A redirected call's task: its caller awaits the call's own future."""
    if not task.cancelled():
        task.exception()
