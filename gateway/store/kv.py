"""A key-value store with expiry: the interface, the in-process backend, the factory.

Values are bytes (callers encode with msgspec); every key has a time to live. Backends:
`memory://` (this process only, lost on restart), `sqlite:///PATH` (the embedded default,
shared by the workers of one machine), `redis://HOST:PORT/DB` (shared by replicas).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Protocol


class KeyValueStore(Protocol):
    async def get(self, key: str) -> bytes | None:
        """The value, or None when absent or expired."""
        ...

    async def put(self, key: str, value: bytes, ttl_s: float) -> None: ...

    async def ping(self) -> bool:
        """True when the store answers (readiness)."""
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


def make_kv(url: str) -> KeyValueStore:
    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        return MemoryKV()
    # sqlite and redis backends: being built (issue 5 store work); memory stands in meanwhile
    return MemoryKV()
