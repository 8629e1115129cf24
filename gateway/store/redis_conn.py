"""How the gateway reaches the redis store: the clients and their timeouts (the URL forms:
redis_url.py)."""

from __future__ import annotations

from typing import Any

from redis.asyncio import BlockingConnectionPool
from redis.asyncio import Redis
from redis.asyncio import RedisCluster
from redis.asyncio.cluster import ClusterNode
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from gateway.store.redis_url import cluster_seeds
from gateway.store.redis_url import is_cluster_url

KEY_PREFIX = "gw:"
CONNECT_TIMEOUT_S = 2.0
COMMAND_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64  # per process (and per cluster node); past it a call waits
POOL_WAIT_S = 5.0
# One immediate retry: after a redis restart, the first command on each pooled connection
# fails on the dead socket and succeeds on a new one.
RETRIES = 1


def connection_options() -> dict[str, Any]:
    return {
        "socket_connect_timeout": CONNECT_TIMEOUT_S,
        "socket_timeout": COMMAND_TIMEOUT_S,
    }


def single_client(url: str) -> Redis:
    """The client of one server (connects on first use, reconnects by itself)."""
    pool = BlockingConnectionPool.from_url(
        url,
        max_connections=MAX_CONNECTIONS,
        timeout=POOL_WAIT_S,
        retry=Retry(NoBackoff(), RETRIES),
        **connection_options(),
    )
    return Redis(connection_pool=pool)


def cluster_client(url: str) -> RedisCluster:
    """The client of a cluster. It learns the slots' owners from the seeds on first use, and
    does not insist that every slot be served (`require_full_coverage=False`): with one
    shard down, the keys of the others keep working."""
    seeds = cluster_seeds(url)
    if seeds is None:
        raise ValueError("not a redis+cluster:// URL")
    options: dict[str, Any] = connection_options()
    if seeds.tls:
        options["ssl"] = True
    return RedisCluster(
        startup_nodes=[ClusterNode(host, port) for host, port in seeds.nodes],
        username=seeds.username,
        password=seeds.password,
        require_full_coverage=False,
        max_connections=MAX_CONNECTIONS,
        retry=Retry(NoBackoff(), RETRIES),
        **options,
    )


def client_for(url: str) -> Redis | RedisCluster:
    """The client of `url`: a cluster's for a redis+cluster:// URL, else one server's."""
    return cluster_client(url) if is_cluster_url(url) else single_client(url)


async def close_client(client: Redis | RedisCluster) -> None:
    if isinstance(client, Redis):
        await client.aclose(close_connection_pool=True)
    else:
        await client.aclose()
