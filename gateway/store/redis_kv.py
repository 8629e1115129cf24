"""The redis backend: one store shared by every replica and worker (redis-py's asyncio client).

Keys carry KEY_PREFIX, so the gateway can share a redis database with other programs. Expiry
is redis's own (SET ... PX), so every replica sees a key vanish at the same moment. The URL's
user, password and database number are used as redis-py reads them; `rediss://` is TLS,
with the server's certificate checked against the system's CAs.

Every failure to talk to redis (refused, timed out, wrong password, TLS) becomes
StoreUnavailable, whose message names the server but never the password. A counter next to
get/put belongs here as INCRBY/INCRBYFLOAT with PEXPIRE in one MULTI.
"""

from __future__ import annotations

import math
from typing import cast
from urllib.parse import urlsplit

from redis.asyncio import BlockingConnectionPool
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from gateway.store.kv import StoreUnavailable

KEY_PREFIX = "gw:"
CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64  # per process; past it a call waits for a free connection
POOL_WAIT_S = 5.0
# One immediate retry: after a redis restart, the first command on each pooled connection
# fails on the dead socket and succeeds on a new one.
RETRIES = 1


def redacted(url: str) -> str:
    """`url` without its userinfo: what messages may say about the server."""
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return f"{parts.scheme}://{host}{parts.path}"


class RedisKV:
    """A KeyValueStore in the redis server of `url`. The client connects on first use and
    reconnects by itself after the server comes back."""

    def __init__(self, url: str) -> None:
        self.where = redacted(url)
        pool = BlockingConnectionPool.from_url(
            url,
            max_connections=MAX_CONNECTIONS,
            timeout=POOL_WAIT_S,
            socket_connect_timeout=CONNECT_TIMEOUT_S,
            socket_timeout=COMMAND_TIMEOUT_S,
            retry=Retry(NoBackoff(), RETRIES),
        )
        self._client = Redis(connection_pool=pool)

    @property
    def client(self) -> Redis:
        """The connection pool's client, shared with the accounting store (redis_ledger)."""
        return self._client

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
        try:
            return bool(await self._client.ping())
        except (RedisError, OSError):
            return False

    async def close(self) -> None:
        await self._client.aclose(close_connection_pool=True)

    def unavailable(self, exc: BaseException) -> StoreUnavailable:
        # redis-py's messages name the host and the server's reply, never the password.
        return StoreUnavailable(f"redis store {self.where}: {type(exc).__name__}: {exc}")
