"""The one-time move of a single redis server's accounting keys to the hash-tagged names.

Before the store supported Redis Cluster its per-key names were `gw:<what>:<id>` (`gw:vk:`,
`vkr`, `rq`, `tk`, `rs`, `sp`, `us`) with a set `gw:uskeys` of the ids with spend; now they
are `gw:{<id>}:<what>` (redis_scripts.py) and spend is found by SCAN. The first ledger of a
process on a single server that finds no `gw:layout` renames every old key to its new name
(RENAMENX: keeping its value and time to live, never overwriting a new key) and then writes
`gw:layout = 2`; every later start reads that one key and does nothing. Processes of the
old version still writing old names after the move are not seen: restart every gateway
that shares the server together (as for any upgrade that changes what the store holds).
`gw:vkh:<sha256>` and `gw:vkeys` kept their names. A cluster never had the old names.
"""

from __future__ import annotations

import asyncio
import logging
from typing import cast

from gateway.store.redis_batch import SINGLE
from gateway.store.redis_batch import Batcher
from gateway.store.redis_conn import KEY_PREFIX
from gateway.store.redis_scripts import LAYOUT

log = logging.getLogger("gateway.store")
OLD_KINDS = ("vk", "vkr", "rq", "tk", "rs", "sp", "us")
SCAN_COUNT = 1000
# renamed only if it still exists (another process may be moving it too)
_MOVE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
return redis.call('RENAMENX', KEYS[1], KEYS[2])
"""


def new_name(old: str) -> str:
    """`gw:sp:key_1` -> `gw:{key_1}:sp`."""
    kind, _, key_id = old.removeprefix(KEY_PREFIX).partition(":")
    return f"{KEY_PREFIX}{{{key_id}}}:{kind}"


async def migrate(batch: Batcher) -> None:
    """Move the old names, once per server (see the module docstring)."""
    if await batch.call(LAYOUT, "GET", LAYOUT) == b"2":
        return
    moved = kept = 0
    for kind in OLD_KINDS:
        cursor: bytes = b"0"
        while True:
            pattern = f"{KEY_PREFIX}{kind}:*"
            reply = await batch.call_on(
                SINGLE, "SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT
            )
            cursor, names = cast("tuple[bytes, list[bytes]]", (reply[0], reply[1]))
            olds = [name.decode() for name in names]
            results = await asyncio.gather(
                *(batch.call(old, "EVAL", _MOVE, 2, old, new_name(old)) for old in olds)
            )
            moved += sum(1 for r in results if r == 1)
            for old, result in zip(olds, results, strict=True):
                if result == 0:
                    kept += 1
                    log.warning("redis store: %s not moved: %s exists", old, new_name(old))
            if cursor == b"0":
                break
    await batch.call(KEY_PREFIX + "uskeys", "DEL", KEY_PREFIX + "uskeys")
    await batch.call(LAYOUT, "SET", LAYOUT, "2")
    if moved or kept:
        log.info("redis store: %d keys moved to the hash-tagged names (%d kept)", moved, kept)
