"""The redis accounting store: budgets, rate limits and keys shared by every replica, on one
redis server or a Redis Cluster (`redis+cluster://`).

`admit` and `settle` are Lua scripts (redis_scripts.py), so each runs atomically in the
server: no replica can read a counter between another's check and its write, and N replicas
hold one budget, not N. An admission is one script call (revocation, expiry, models, the rpm
and tpm windows, the budget and the reservation); a settle is one, a release one command.
Every key of one virtual key shares its hash tag, so on a cluster each script runs on the
one shard that owns the key, and different keys spread over the shards.

A stored key is named by its secret's hash: `gw:vkh:<sha256>` (a slot of its own) holds its
id, read once per process and kept (a hash never names another key: ids and secrets are
never reused, and a key is revoked, not deleted); after that an admission is the script
alone. The calls of one turn of the event loop go to each server in one pipeline
(redis_batch.py).
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import Any
from typing import cast

from gateway.store.ledger import Admission
from gateway.store.ledger import Admitted
from gateway.store.ledger import CacheHits
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import KeySpend
from gateway.store.ledger import SpendRow
from gateway.store.ledger import Verdict
from gateway.store.ledger import record_decoder
from gateway.store.ledger import record_encoder
from gateway.store.redis_batch import Batcher
from gateway.store.redis_conn import KEY_PREFIX
from gateway.store.redis_migrate import migrate
from gateway.store.redis_scripts import ADMIT
from gateway.store.redis_scripts import ANONYMOUS_USAGE
from gateway.store.redis_scripts import INDEX
from gateway.store.redis_scripts import SETTLE
from gateway.store.redis_scripts import KeyNames
from gateway.store.redis_scripts import by_hash

_STATS = {"cost": "cost_nanos", "requests": "requests", "in": "input_tokens"}
_STATS |= {"out": "output_tokens", "estimated": "estimated"}
_STATS |= {"hits": "cache_hits", "saved": "cache_saved_nanos"}
_USAGE = (KEY_PREFIX + "{", "}:us")
MEMO = 100_000  # key ids and names kept per process (cleared when full)
SCAN_COUNT = 1000


def _sha(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()


_ADMIT_SHA, _SETTLE_SHA = _sha(ADMIT), _sha(SETTLE)


class RedisLedger:
    """A Ledger in the redis server or cluster of `url` (connections of its own)."""

    def __init__(self, url: str) -> None:
        self._batch = Batcher(url, [ADMIT, SETTLE])
        self._ids: dict[str, str] = {}  # secret hash -> key id
        self._names: dict[str, KeyNames] = {}
        self._layout_ok = self._batch.cluster  # a cluster has nothing to migrate
        self._layout: asyncio.Task[None] | None = None

    async def admit(self, ask: Admission) -> Admitted:
        if not self._layout_ok:
            await self._ready()
        static = ask.record
        if static is not None:
            key_id, raw = static.id, record_encoder.encode(static)
        else:
            raw = b""
            found = self._ids.get(ask.secret_hash)
            if found is None:
                found = await self._key_id(ask.secret_hash)
                if found is None:
                    return Admitted(verdict="unknown")
            key_id = found
        w = ask.windows
        names = self._names_of(key_id)
        answer = cast(
            "list[bytes]",
            await self._batch.call(
                names.vk,
                "EVALSHA",
                _ADMIT_SHA,
                6,
                *names.admit,
                raw,
                ask.model,
                _ms(ask.now),
                ask.reserve_nanos,
                ask.tokens,
                _ms(ask.hold_s),
                ask.ticket,
                w.get("daily", ""),
                w.get("weekly", ""),
                w.get("monthly", ""),
            ),
        )
        verdict = cast("Verdict", answer[0].decode())
        if verdict == "unknown":
            self._ids.pop(ask.secret_hash, None)  # the store lost the key (flushed)
            return Admitted(verdict=verdict)
        record = static if static is not None else record_decoder.decode(answer[1])
        if verdict == "revoked":
            record.revoked = True
        if verdict != "ok":
            retry = float(answer[2]) / 1000 if len(answer) > 2 else 0.0
            return Admitted(verdict=verdict, record=record, retry_after_s=max(retry, 0.001))
        return Admitted(
            verdict="ok", record=record, window=answer[3].decode(), reserved_nanos=int(answer[4])
        )

    async def settle(self, charge: Charge) -> None:
        if not self._layout_ok:
            await self._ready()
        c = charge
        keys: tuple[str, ...] = self._names_of(c.key_id).settle if c.key_id else (ANONYMOUS_USAGE,)
        await self._batch.call(
            keys[0],
            "EVALSHA",
            _SETTLE_SHA,
            len(keys),
            *keys,
            c.ticket,
            c.reserved_nanos,
            c.cost_nanos,
            c.input_tokens,
            c.output_tokens,
            int(c.estimated),
            c.model,
            c.window,
            _ms(c.now),
        )

    async def count_hits(self, hits: list[CacheHits]) -> None:
        """Into the key's usage hash, beside what `settle` counts there."""
        if not self._layout_ok:
            await self._ready()
        calls = []
        for hit in hits:
            name = self._names_of(hit.key_id).us if hit.key_id else ANONYMOUS_USAGE
            calls.append(self._batch.call(name, "HINCRBY", name, f"{hit.model}\thits", hit.hits))
            saved = f"{hit.model}\tsaved"
            calls.append(self._batch.call(name, "HINCRBY", name, saved, hit.saved_nanos))
        await asyncio.gather(*calls)

    async def release(self, key_id: str, ticket: str, reserved_nanos: int) -> None:
        if not self._layout_ok:
            await self._ready()
        rs = self._names_of(key_id).rs
        await self._batch.call(rs, "ZREM", rs, f"{ticket}:{reserved_nanos}")

    async def create_key(self, record: KeyRecord) -> None:
        """The record and the index first, the hash's entry last: a key is usable only
        once it is complete (on a cluster these are three shards, not one transaction)."""
        await self._ready()
        names = self._names_of(record.id)
        await asyncio.gather(
            self._batch.call(names.vk, "SET", names.vk, record_encoder.encode(record)),
            self._batch.call(INDEX, "ZADD", INDEX, record.created_at, record.id),
        )
        lookup = by_hash(record.secret_hash)
        await self._batch.call(lookup, "SET", lookup, record.id)

    async def find_key(self, secret_hash: str) -> KeyRecord | None:
        await self._ready()
        key_id = await self._key_id(secret_hash)
        return None if key_id is None else await self.get_key(key_id)

    async def get_key(self, key_id: str) -> KeyRecord | None:
        found = await self._records([key_id])
        return found[0] if found else None

    async def list_keys(self) -> list[KeyRecord]:
        await self._ready()
        ids = cast("list[bytes]", await self._batch.call(INDEX, "ZRANGE", INDEX, 0, -1))
        return await self._records([i.decode() for i in ids])

    async def revoke_key(self, key_id: str) -> bool:
        if await self.get_key(key_id) is None:
            return False
        vkr = self._names_of(key_id).vkr
        await self._batch.call(vkr, "SET", vkr, b"1")
        return True

    async def key_spend(self, key_id: str, window: str, now: float) -> KeySpend:
        await self._ready()
        names = self._names_of(key_id)
        spent, members = await asyncio.gather(
            self._batch.call(names.sp, "HMGET", names.sp, "total", window),
            self._batch.call(names.rs, "ZRANGEBYSCORE", names.rs, f"({_ms(now)}", "+inf"),
        )
        held = sum(int(m.rpartition(b":")[2]) for m in cast("list[bytes]", members))
        total, in_window = cast("list[bytes | None]", spent)
        return KeySpend(
            total_nanos=int(total or 0), window_nanos=int(in_window or 0), reserved_nanos=held
        )

    async def spend(self) -> list[SpendRow]:
        """Spend is found by SCAN of every primary for `gw:{*}:us` (no index to keep in
        step on another shard): admin work that grows with the size of the database."""
        await self._ready()
        found: list[str] = []
        for server in await self._batch.servers():
            found += await self._scan(server, f"{KEY_PREFIX}{{*}}:us")
        usage = [name for name in found if name.startswith(_USAGE[0]) and name.endswith(_USAGE[1])]
        stats = await asyncio.gather(*(self._batch.call(n, "HGETALL", n) for n in usage))
        rows: dict[tuple[str, str], SpendRow] = {}
        for name, flat in zip(usage, stats, strict=True):
            key_id = name[len(_USAGE[0]) : -len(_USAGE[1])]
            for field, value in _pairs(flat):
                model, _, stat = field.decode().rpartition("\t")
                row = rows.get((key_id, model))
                if row is None:
                    row = rows[(key_id, model)] = SpendRow(key_id=key_id, model=model)
                if stat in _STATS:
                    setattr(row, _STATS[stat], int(value))
        return [rows[k] for k in sorted(rows)]

    async def close(self) -> None:
        if self._layout is not None and not self._layout.done():
            await asyncio.wait({self._layout})
        await self._batch.close()

    # --- helpers -----------------------------------------------------------------------------

    async def _ready(self) -> None:
        """Once per process on a single server: the move to the hash-tagged names."""
        if self._layout_ok:
            return
        if self._layout is None or (self._layout.done() and self._layout.exception()):
            self._layout = asyncio.get_running_loop().create_task(migrate(self._batch))
        await asyncio.shield(self._layout)
        self._layout_ok = True

    async def _key_id(self, secret_hash: str) -> str | None:
        lookup = by_hash(secret_hash)
        raw = cast("bytes | None", await self._batch.call(lookup, "GET", lookup))
        if raw is None:
            return None
        if len(self._ids) >= MEMO:
            self._ids.clear()
        key_id = self._ids[secret_hash] = raw.decode()
        return key_id

    def _names_of(self, key_id: str) -> KeyNames:
        names = self._names.get(key_id)
        if names is None:
            if len(self._names) >= MEMO:
                self._names.clear()
            names = self._names[key_id] = KeyNames(key_id)
        return names

    async def _records(self, ids: list[str]) -> list[KeyRecord]:
        await self._ready()
        names = [self._names_of(i) for i in ids]
        raws: list[Any] = await asyncio.gather(
            *(self._batch.call(n.vk, "GET", n.vk) for n in names),
            *(self._batch.call(n.vkr, "GET", n.vkr) for n in names),
        )
        records = []
        for raw, gone in zip(raws[: len(ids)], raws[len(ids) :], strict=True):
            if raw is not None:
                record = record_decoder.decode(raw)
                record.revoked = gone is not None
                records.append(record)
        return records

    async def _scan(self, server: str, pattern: str) -> list[str]:
        names: list[str] = []
        cursor: bytes = b"0"
        while True:
            reply = await self._batch.call_on(
                server, "SCAN", cursor, "MATCH", pattern, "COUNT", SCAN_COUNT
            )
            cursor = reply[0]
            names += [n.decode() for n in reply[1]]
            if cursor == b"0":
                return names


def _pairs(reply: Any) -> list[tuple[bytes, bytes]]:
    """HGETALL's reply: a map in RESP3, a flat list in RESP2."""
    if isinstance(reply, dict):
        return list(reply.items())
    flat = cast("list[bytes]", reply)
    return list(zip(flat[::2], flat[1::2], strict=True))


def _ms(seconds: float) -> int:
    return int(seconds * 1000)
