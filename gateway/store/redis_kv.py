"""The redis backend: one store shared by every replica and worker (redis-py's asyncio client).

Keys carry KEY_PREFIX, so the gateway can share a redis database with other programs. Expiry
is redis's own (SET ... PX), so every replica sees a key vanish at the same moment. The URL's
user, password and database number are used as redis-py reads them; `rediss://` is TLS,
with the server's certificate checked against the system's CAs. `redis+cluster://` (see
redis_conn.py) is a Redis Cluster: each key is one command on the shard that owns its slot.

Every failure to talk to redis (refused, timed out, wrong password, TLS, a cluster shard
down) becomes StoreUnavailable, whose message names the server but never the password.
"""

from __future__ import annotations

import asyncio
import math
from typing import cast

from redis.asyncio import Redis
from redis.asyncio import RedisCluster
from redis.exceptions import RedisError

from gateway.store.kv import StoreUnavailable
from gateway.store.redis_conn import KEY_PREFIX
from gateway.store.redis_conn import client_for
from gateway.store.redis_conn import close_client
from gateway.store.redis_url import redacted

__all__ = ["KEY_PREFIX", "RedisKV", "redacted"]


class RedisKV:
    """A KeyValueStore in the redis server (or cluster) of `url`. The client connects on
    first use and reconnects by itself after the server comes back."""

    def __init__(self, url: str) -> None:
        self.where = redacted(url)
        self._client: Redis | RedisCluster = client_for(url)

    async def get(self, key: str) -> bytes | None:
        try:
            value = await self._client.get(KEY_PREFIX + key)
        except (RedisError, OSError) as exc:
            raise self.unavailable(exc) from exc
        # decode_responses is off, so redis-py hands back bytes (its stubs also allow str).
        return cast("bytes | None", value)

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        try:
            if ttl_s > 0:
                # Rounded up: a key must not vanish before the time it was given.
                ttl_ms = max(1, math.ceil(ttl_s * 1000))
                await self._client.set(KEY_PREFIX + key, value, px=ttl_ms)
            else:
                await self._client.delete(KEY_PREFIX + key)
        except (RedisError, OSError) as exc:
            raise self.unavailable(exc) from exc

    async def ping(self) -> bool:
        """A cluster is ready while any primary answers: a shard that is down fails only the
        requests whose keys it owns (503 store_unavailable), and a readiness probe that
        failed with it would take every replica out of its load balancer at once."""
        client = self._client
        try:
            if isinstance(client, Redis):
                return bool(await client.ping())
            await client.initialize()
            nodes = client.get_primaries()
            answers = await asyncio.gather(
                *(client.ping(target_nodes=node) for node in nodes), return_exceptions=True
            )
            return any(answer is True for answer in answers)
        except (RedisError, OSError):
            return False

    async def close(self) -> None:
        await close_client(self._client)

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        # redis-py's messages name the host and the server's reply, never the password.
        return StoreUnavailable(f"redis store {self.where}: {type(exc).__name__}: {exc}")
