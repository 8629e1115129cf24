"""A key-value store with expiry: the interface, its errors, the in-process backend, the factory.

Values are bytes (callers encode with msgspec); every key has a time to live. Backends:
`memory://` (this process only, lost on restart), `sqlite:///PATH` (the embedded default,
shared by the workers of one machine: sqlite_kv.py), `redis://HOST:PORT/DB` and `rediss://`
(shared by replicas: redis_kv.py), and `redis+cluster://HOST:PORT[,HOST:PORT...]` (a Redis
Cluster: redis_conn.py).

Errors, by what the caller does next:

    StoreError
    ├── StoreUnavailable     the store did not answer (down, unreachable, locked, refused our
    │                        credentials): fail closed for this request; it may come back
    └── StoreMisconfigured   store.url can never work as written (a directory that does not
                             exist): refuse to start

No message of either ever carries a password from the URL.
"""

from __future__ import annotations

import os
import time
from collections import OrderedDict
from typing import Protocol


class StoreError(Exception):
    """Base of the store's errors."""


class StoreUnavailable(StoreError):
    """The store did not answer; callers fail closed (deny, or answer 503), never open."""


class StoreMisconfigured(StoreError):
    """store.url names a store that cannot exist as written; the gateway must not start."""


class KeyValueStore(Protocol):
    """Every method but `ping` and `close` raises StoreUnavailable when the store does not
    answer. A put with `ttl_s <= 0` leaves the key absent."""

    async def get(self, key: str) -> bytes | None:
        """The value, or None when absent or expired."""
        ...

    async def put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def ping(self) -> bool:
        """True when the store answers (readiness); never raises."""
        ...

    async def close(self) -> None: ...


class MemoryKV:
    """In-process, bounded (least recently written entries go first past `max_entries`)."""

    def __init__(self, max_entries: int = 100_000) -> None:
        self._data: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._max = max_entries

    async def get(self, key: str) -> bytes | None:
        entry = self._data.get(key)
        if entry is None:
            return None
        expires, value = entry
        if expires <= time.monotonic():
            del self._data[key]
            return None
        return value

    async def put(self, key: str, value: bytes, ttl_s: float) -> None:
        self._data[key] = (time.monotonic() + ttl_s, value)
        self._data.move_to_end(key)
        while len(self._data) > self._max:
            self._data.popitem(last=False)

    async def ping(self) -> bool:
        return True

    async def close(self) -> None:
        self._data.clear()


SQLITE_PREFIX = "sqlite:///"
STORE_FORMS = "memory://, sqlite:///PATH, redis://, rediss:// or redis+cluster://"


def sqlite_path(url: str) -> str:
    """The database path of a `sqlite:///PATH` URL, read as SQLAlchemy reads it: what follows
    the third slash, so `sqlite:///gw.db` is relative to the working directory and
    `sqlite:////var/lib/gw.db` is absolute. `:memory:` stays as it is; anything else is made
    absolute now, so that every worker process opens the same file."""
    path = url.removeprefix(SQLITE_PREFIX)
    if path == ":memory:":
        return path
    return os.path.abspath(path)


def store_problem(url: str) -> str | None:
    """Why the store of `url` cannot work as written, or None; checked before serving, so a
    missing directory stops the gateway with one clear line instead of failing every request."""
    if not url.startswith(SQLITE_PREFIX):
        return None
    path = sqlite_path(url)
    if path == ":memory:":
        return None
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        return f"the directory of the sqlite database does not exist: {directory}"
    if os.path.isdir(path):
        return f"the sqlite database path is a directory: {path}"
    return None


def make_kv(url: str) -> KeyValueStore:
    """The backend for a validated `store.url`. Nothing is opened here: each backend
    connects on first use, so a store that is down at startup only shows in /readyz.
    Raises StoreMisconfigured for a URL that cannot work (see `store_problem`)."""
    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        return MemoryKV()
    if url.startswith(SQLITE_PREFIX):
        problem = store_problem(url)
        if problem:
            raise StoreMisconfigured(f"store.url: {problem}")
        from gateway.store.sqlite_kv import SqliteKV

        return SqliteKV(sqlite_path(url))
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        from gateway.store.redis_kv import RedisKV

        return RedisKV(url)
    # Nothing of the URL is quoted: it may carry a password.
    raise StoreMisconfigured(f"store.url: expected {STORE_FORMS}")
