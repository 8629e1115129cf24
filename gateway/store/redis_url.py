"""The redis store's URL forms (no redis import here: the config check reads them).

    redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]          one server (or a primary)
    rediss://...                                         the same over TLS
    redis+cluster://[[USER]:PASSWORD@]HOST:PORT[,HOST:PORT...][/0]
    rediss+cluster://...                                 a Redis Cluster over TLS

A cluster URL names seed nodes (any of them; the rest of the cluster is learned from them)
in one string, so that `store.url` stays the one place a store is chosen and the URL's
password is redacted like a single server's. A cluster has database 0 only.
"""

from __future__ import annotations

from typing import NamedTuple
from urllib.parse import unquote
from urllib.parse import urlsplit

SINGLE_SCHEMES = ("redis", "rediss")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")


class ClusterSeeds(NamedTuple):
    tls: bool
    username: str | None
    password: str | None
    nodes: list[tuple[str, int]]


def redacted(url: str) -> str:
    """`url` without its userinfo: what messages may say about the server."""
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    return f"{scheme}://{netloc.rpartition('@')[2]}{slash}{path}"


def is_cluster_url(url: str) -> bool:
    return url.partition("://")[0].lower() in CLUSTER_SCHEMES


def cluster_seeds(url: str) -> ClusterSeeds | None:
    """The seed nodes of a `redis+cluster://` URL, or None when it is not a valid one."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() not in CLUSTER_SCHEMES or "?" in rest or "#" in rest:
        return None
    netloc, _, path = rest.partition("/")
    if path not in ("", "0"):
        return None
    userinfo, at, hosts = netloc.rpartition("@")
    username: str | None = None
    password: str | None = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username = unquote(user) or None
        password = unquote(secret) if colon else None
    nodes: list[tuple[str, int]] = []
    for host in hosts.split(","):
        try:
            parts = urlsplit(f"//{host}")
            port = parts.port
        except ValueError:
            return None
        if not parts.hostname or port is None:
            return None
        nodes.append((parts.hostname, port))
    return ClusterSeeds(scheme.lower().startswith("rediss"), username, password, nodes)
