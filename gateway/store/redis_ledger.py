"""The redis accounting store: budgets, rate limits and keys shared by every replica.

`admit` and `settle` are Lua scripts, so each runs atomically in the server: no replica can
read a counter between another's check and its write, and N replicas hold one budget, not N.
`rq:<id>` is a sorted set of the requests admitted in the last minute, scored by
milliseconds (rpm); `tk:<id>` a hash of tokens settled per second (tpm: at most 60 fields
to sum, whatever the rate); `rs:<id>` a sorted set of `<ticket>:<nanos>` reservations
scored by their expiry. `sp:<id>` is a hash of spend per
budget window (`total` and e.g. `d2026-11-30`), `us:<id>` a hash of usage per model
(`<model>\\t<stat>`), `vk:<id>` a key's JSON record, `vkh:<sha256>` its id, `vkr:<id>` its
revocation. Amounts are integers added with HINCRBY; in the scripts' own arithmetic (Lua
doubles) they stay exact up to 2**53 nanodollars, about nine million dollars per key.

The scripts name keys they find at run time (the key id behind a hash), which a Redis
Cluster does not allow: one redis server (or a primary with replicas) per gateway fleet.

The admissions and settles of one turn of the event loop go to the server in one pipeline
(not a transaction: each script is atomic on its own, and they run in arrival order): one
round trip and one pass through redis-py for many requests, which under load is most of
what a store call costs on the gateway's side.
"""

from __future__ import annotations

import asyncio
from typing import Any
from typing import cast

from redis.asyncio import Redis
from redis.commands.core import AsyncScript
from redis.exceptions import NoScriptError
from redis.exceptions import RedisError

from gateway.store.ledger import Admission
from gateway.store.ledger import Admitted
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import KeySpend
from gateway.store.ledger import SpendRow
from gateway.store.ledger import Verdict
from gateway.store.ledger import record_decoder
from gateway.store.ledger import record_encoder
from gateway.store.redis_kv import KEY_PREFIX
from gateway.store.redis_kv import RedisKV

_ADMIT = """
local P = ARGV[12]
local raw = ARGV[2]
if raw == '' then
  local id = redis.call('GET', P .. 'vkh:' .. ARGV[1])
  if not id then return {'unknown'} end
  raw = redis.call('GET', P .. 'vk:' .. id)
  if not raw then return {'unknown'} end
end
local rec = cjson.decode(raw)
local function val(v) if v == cjson.null then return nil end return v end
local id = rec.id
if redis.call('EXISTS', P .. 'vkr:' .. id) == 1 then return {'revoked', raw} end
local now = tonumber(ARGV[4])
local expires = val(rec.expires_at)
if expires and now >= expires * 1000 then return {'expired', raw} end
local models = val(rec.models)
if models then
  local allowed = false
  for _, m in ipairs(models) do if m == ARGV[3] then allowed = true break end end
  if not allowed then return {'model', raw} end
end
local rq, tk, rs = P .. 'rq:' .. id, P .. 'tk:' .. id, P .. 'rs:' .. id
redis.call('ZREMRANGEBYSCORE', rq, '-inf', now - 60000)
redis.call('ZREMRANGEBYSCORE', rs, '-inf', now)
local rpm = val(rec.rpm)
if rpm and redis.call('ZCARD', rq) >= rpm then
  local oldest = redis.call('ZRANGE', rq, 0, 0, 'WITHSCORES')
  return {'rpm', raw, tostring(tonumber(oldest[2]) + 60000 - now)}
end
local tpm = val(rec.tpm)
if tpm then
  local used, first = 0, nil
  local horizon = math.floor((now - 60000) / 1000)
  local seconds = redis.call('HGETALL', tk)
  for i = 1, #seconds, 2 do
    local second = tonumber(seconds[i])
    if second <= horizon then
      redis.call('HDEL', tk, seconds[i])
    else
      used = used + tonumber(seconds[i + 1])
      if not first or second < first then first = second end
    end
  end
  if used > 0 and used + tonumber(ARGV[6]) > tpm then
    return {'tpm', raw, tostring(first * 1000 + 60000 - now)}
  end
end
local window = 'total'
local period = rec.budget_period
if period == 'daily' then window = ARGV[9]
elseif period == 'weekly' then window = ARGV[10]
elseif period == 'monthly' then window = ARGV[11] end
local budget = val(rec.budget_nanos)
local reserved = '0'
if budget then
  local spent = tonumber(redis.call('HGET', P .. 'sp:' .. id, window) or '0')
  local held = 0
  for _, member in ipairs(redis.call('ZRANGE', rs, 0, -1)) do
    held = held + tonumber(string.match(member, ':(%d+)$'))
  end
  if spent + held + tonumber(ARGV[5]) > budget then return {'budget', raw} end
  if tonumber(ARGV[5]) > 0 then
    reserved = ARGV[5]
    redis.call('ZADD', rs, now + tonumber(ARGV[7]), ARGV[8] .. ':' .. ARGV[5])
    redis.call('PEXPIRE', rs, tonumber(ARGV[7]) + 60000)
  end
end
if rpm then
  redis.call('ZADD', rq, now, ARGV[8])
  redis.call('PEXPIRE', rq, 61000)
end
return {'ok', raw, '0', window, reserved}
"""

_SETTLE = """
local P = ARGV[11]
local id, ticket, cost = ARGV[1], ARGV[2], ARGV[4]
if id ~= '' then
  if ticket ~= '' then redis.call('ZREM', P .. 'rs:' .. id, ticket .. ':' .. ARGV[3]) end
  local sp = P .. 'sp:' .. id
  redis.call('HINCRBY', sp, 'total', cost)
  if ARGV[9] ~= '' and ARGV[9] ~= 'total' then redis.call('HINCRBY', sp, ARGV[9], cost) end
  local tk = P .. 'tk:' .. id
  local second = tostring(math.floor(tonumber(ARGV[10]) / 1000))
  redis.call('HINCRBY', tk, second, tonumber(ARGV[5]) + tonumber(ARGV[6]))
  redis.call('PEXPIRE', tk, 61000)
end
redis.call('SADD', P .. 'uskeys', id)
local us, m = P .. 'us:' .. id, ARGV[8] .. '\\t'
redis.call('HINCRBY', us, m .. 'cost', cost)
redis.call('HINCRBY', us, m .. 'requests', 1)
redis.call('HINCRBY', us, m .. 'in', ARGV[5])
redis.call('HINCRBY', us, m .. 'out', ARGV[6])
redis.call('HINCRBY', us, m .. 'estimated', ARGV[7])
return 1
"""

_STATS = {"cost": "cost_nanos", "requests": "requests", "in": "input_tokens"}
_STATS |= {"out": "output_tokens", "estimated": "estimated"}


class RedisLedger:
    """A Ledger in the redis server of `url` (its own connection pool, like RedisKV's)."""

    def __init__(self, url: str) -> None:
        self._kv = RedisKV(url)
        self._client: Redis = self._kv.client
        self._admit = self._client.register_script(_ADMIT)
        self._settle = self._client.register_script(_SETTLE)
        # script calls waiting for this loop turn's pipeline, and the pipelines in flight
        self._queued: list[tuple[AsyncScript, list[str | int | float], asyncio.Future[Any]]] = []
        self._sending: set[asyncio.Task[None]] = set()

    async def admit(self, ask: Admission) -> Admitted:
        static = record_encoder.encode(ask.record).decode() if ask.record is not None else ""
        w = ask.windows
        args: list[str | int | float] = [
            ask.secret_hash,
            static,
            ask.model,
            _ms(ask.now),
            ask.reserve_nanos,
        ]
        args += [ask.tokens, _ms(ask.hold_s), ask.ticket]
        args += [w.get("daily", ""), w.get("weekly", ""), w.get("monthly", ""), KEY_PREFIX]
        answer = cast("list[bytes]", await self._script(self._admit, args))
        verdict = cast("Verdict", answer[0].decode())
        if verdict == "unknown":
            return Admitted(verdict=verdict)
        record = _with_static(record_decoder.decode(answer[1]), ask.record)
        if verdict == "revoked":
            record.revoked = True
        retry = float(answer[2]) / 1000 if len(answer) > 2 else 0.0
        if verdict != "ok":
            return Admitted(verdict=verdict, record=record, retry_after_s=max(retry, 0.001))
        return Admitted(
            verdict="ok", record=record, window=answer[3].decode(), reserved_nanos=int(answer[4])
        )

    async def settle(self, charge: Charge) -> None:
        c = charge
        args: list[str | int | float] = [
            c.key_id,
            c.ticket,
            c.reserved_nanos,
            c.cost_nanos,
            c.input_tokens,
        ]
        args += [c.output_tokens, int(c.estimated), c.model, c.window, _ms(c.now), KEY_PREFIX]
        await self._script(self._settle, args)

    async def release(self, key_id: str, ticket: str, reserved_nanos: int) -> None:
        member = f"{ticket}:{reserved_nanos}"
        await self._call(self._client.zrem(f"{KEY_PREFIX}rs:{key_id}", member))

    async def create_key(self, record: KeyRecord) -> None:
        async def op() -> None:
            async with self._client.pipeline(transaction=True) as pipe:
                pipe.set(f"{KEY_PREFIX}vk:{record.id}", record_encoder.encode(record))
                pipe.set(f"{KEY_PREFIX}vkh:{record.secret_hash}", record.id)
                pipe.zadd(f"{KEY_PREFIX}vkeys", {record.id: record.created_at})
                await pipe.execute()

        await self._call(op())

    async def find_key(self, secret_hash: str) -> KeyRecord | None:
        key_id = await self._call(self._client.get(f"{KEY_PREFIX}vkh:{secret_hash}"))
        if key_id is None:
            return None
        return await self.get_key(cast("bytes", key_id).decode())

    async def get_key(self, key_id: str) -> KeyRecord | None:
        found = await self._records([key_id])
        return found[0] if found else None

    async def list_keys(self) -> list[KeyRecord]:
        pending = self._client.zrange(f"{KEY_PREFIX}vkeys", 0, -1)
        ids = cast("list[bytes]", await self._call(pending))
        return await self._records([i.decode() for i in ids])

    async def revoke_key(self, key_id: str) -> bool:
        if await self.get_key(key_id) is None:
            return False
        await self._call(self._client.set(f"{KEY_PREFIX}vkr:{key_id}", b"1"))
        return True

    async def key_spend(self, key_id: str, window: str, now: float) -> KeySpend:
        spent = cast(
            "list[bytes | None]",
            await self._call(self._client.hmget(f"{KEY_PREFIX}sp:{key_id}", ["total", window])),
        )
        members = cast(
            "list[bytes]",
            await self._call(
                self._client.zrangebyscore(f"{KEY_PREFIX}rs:{key_id}", f"({_ms(now)}", "+inf")
            ),
        )
        held = sum(int(m.rpartition(b":")[2]) for m in members)
        return KeySpend(
            total_nanos=int(spent[0] or 0), window_nanos=int(spent[1] or 0), reserved_nanos=held
        )

    async def spend(self) -> list[SpendRow]:
        ids = cast("set[bytes]", await self._call(self._client.smembers(f"{KEY_PREFIX}uskeys")))
        rows: dict[tuple[str, str], SpendRow] = {}
        for raw_id in sorted(ids):
            key_id = raw_id.decode()
            stats = cast(
                "dict[bytes, bytes]",
                await self._call(self._client.hgetall(f"{KEY_PREFIX}us:{key_id}")),
            )
            for field, value in stats.items():
                model, _, stat = field.decode().rpartition("\t")
                row = rows.get((key_id, model))
                if row is None:
                    row = rows[(key_id, model)] = SpendRow(key_id=key_id, model=model)
                if stat in _STATS:
                    setattr(row, _STATS[stat], int(value))
        return [rows[k] for k in sorted(rows)]

    async def close(self) -> None:
        if self._queued:
            self._send_queued()
        if self._sending:  # pipelines in flight are answered before the connections go
            await asyncio.wait(tuple(self._sending))
        await self._kv.close()

    async def _records(self, ids: list[str]) -> list[KeyRecord]:
        if not ids:
            return []
        raws = cast(
            "list[bytes | None]",
            await self._call(self._client.mget([f"{KEY_PREFIX}vk:{i}" for i in ids])),
        )
        revoked = cast(
            "list[bytes | None]",
            await self._call(self._client.mget([f"{KEY_PREFIX}vkr:{i}" for i in ids])),
        )
        records = []
        for raw, gone in zip(raws, revoked, strict=True):
            if raw is not None:
                record = record_decoder.decode(raw)
                record.revoked = gone is not None
                records.append(record)
        return records

    async def _script(self, script: AsyncScript, args: list[str | int | float]) -> Any:
        """One script call, sent with the others of this loop turn (see the docstring)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._queued.append((script, args, future))
        if len(self._queued) == 1:
            loop.call_soon(self._send_queued)
        return await future

    def _send_queued(self) -> None:
        batch, self._queued = self._queued, []
        task = asyncio.get_running_loop().create_task(self._send(batch))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(
        self, batch: list[tuple[AsyncScript, list[str | int | float], asyncio.Future[Any]]]
    ) -> None:
        try:
            results: list[Any] = await self._pipeline(batch)
        except Exception as exc:  # the server or a bug: every caller gets the error
            results = [exc] * len(batch)
        except BaseException:  # cancelled (the process stops): no caller waits forever
            for _, _, future in batch:
                if not future.done():
                    future.cancel()
            raise
        for (_, _, future), result in zip(batch, results, strict=True):
            if future.done():
                continue  # its caller was cancelled
            if isinstance(result, RedisError | OSError):
                future.set_exception(self._kv.unavailable(result))
            elif isinstance(result, BaseException):
                future.set_exception(result)
            else:
                future.set_result(result)

    async def _pipeline(
        self, batch: list[tuple[AsyncScript, list[str | int | float], asyncio.Future[Any]]]
    ) -> list[Any]:
        """EVALSHA of every call in one round trip; the scripts are loaded (SCRIPT LOAD) only
        when the server says it does not have them (a restarted or flushed server)."""
        for attempt in range(2):
            async with self._client.pipeline(transaction=False) as pipe:
                for script, args, _ in batch:
                    pipe.evalsha(script.sha, 0, *args)
                results: list[Any] = await pipe.execute(raise_on_error=False)
            if attempt or not any(isinstance(r, NoScriptError) for r in results):
                return results
            for script in {id(s): s for s, _, _ in batch}.values():
                await self._client.script_load(script.script)
        return results

    async def _call(self, pending: Any) -> Any:
        try:
            return await pending
        except (RedisError, OSError) as exc:
            raise self._kv.unavailable(exc) from exc


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def _with_static(record: KeyRecord, static: KeyRecord | None) -> KeyRecord:
    return static if static is not None else record
