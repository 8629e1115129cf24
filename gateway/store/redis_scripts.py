"""The redis accounting store's key names and Lua scripts.

Every key of one virtual key carries the key's id as its hash tag, `gw:{<id>}:<what>`, so a
Redis Cluster keeps them on one slot and each script below touches one slot only (and
names every key it touches in KEYS, as a cluster requires). The same names serve a single
server. `{}` (the empty tag, hashed as the whole name in a cluster) is the spend of the
master key and an open gateway, which has no reservations or windows.

    gw:{<id>}:vk    the key's JSON record
    gw:{<id>}:vkr   present when the key is revoked
    gw:{<id>}:rq    sorted set of the requests admitted in the last minute, by ms (rpm)
    gw:{<id>}:tk    hash of tokens settled per second (tpm: at most 60 fields to sum)
    gw:{<id>}:rs    sorted set of `<ticket>:<nanos>` reservations, scored by their expiry
    gw:{<id>}:sp    hash of spend per budget window (`total`, `d2026-11-30`, ...)
    gw:{<id>}:us    hash of usage per model (`<model>\\t<stat>`)
    gw:vkh:<sha256> the id of the key whose secret has this hash (a slot of its own)
    gw:vkeys        sorted set of every stored key's id, by creation time (a fixed slot)

Amounts are integers added with HINCRBY; in the scripts' own arithmetic (Lua doubles) they
stay exact up to 2**53 nanodollars, about nine million dollars per key.
"""

from __future__ import annotations

from gateway.store.redis_conn import KEY_PREFIX

INDEX = KEY_PREFIX + "vkeys"
LAYOUT = KEY_PREFIX + "layout"  # "2": the per-key names above (see redis_migrate.py)
ANONYMOUS_USAGE = KEY_PREFIX + "{}:us"


def by_hash(secret_hash: str) -> str:
    return f"{KEY_PREFIX}vkh:{secret_hash}"


class KeyNames:
    """The names of one key id's keys, made once per id (they are sent on every call)."""

    __slots__ = ("admit", "rs", "settle", "sp", "us", "vk", "vkr")

    def __init__(self, key_id: str) -> None:
        tag = f"{KEY_PREFIX}{{{key_id}}}:"
        self.vk, self.vkr, self.rs, self.sp = tag + "vk", tag + "vkr", tag + "rs", tag + "sp"
        self.us = tag + "us"
        rq, tk = tag + "rq", tag + "tk"
        self.admit = (self.vk, self.vkr, rq, tk, self.rs, self.sp)
        self.settle = (self.rs, self.sp, tk, self.us)


# KEYS: vk vkr rq tk rs sp. ARGV: static record JSON ('' : read vk), model, now (ms),
# reserve, tokens, hold (ms), ticket, daily, weekly and monthly window ids.
ADMIT = """
local raw = ARGV[1]
if raw == '' then
  raw = redis.call('GET', KEYS[1])
  if not raw then return {'unknown'} end
end
local rec = cjson.decode(raw)
local function val(v) if v == cjson.null then return nil end return v end
if redis.call('EXISTS', KEYS[2]) == 1 then return {'revoked', raw} end
local now = tonumber(ARGV[3])
local expires = val(rec.expires_at)
if expires and now >= expires * 1000 then return {'expired', raw} end
local models = val(rec.models)
if models then
  local allowed = false
  for _, m in ipairs(models) do if m == ARGV[2] then allowed = true break end end
  if not allowed then return {'model', raw} end
end
local rq, tk, rs = KEYS[3], KEYS[4], KEYS[5]
local rpm = val(rec.rpm)
if rpm then
  redis.call('ZREMRANGEBYSCORE', rq, '-inf', now - 60000)
  if redis.call('ZCARD', rq) >= rpm then
    local oldest = redis.call('ZRANGE', rq, 0, 0, 'WITHSCORES')
    return {'rpm', raw, tostring(tonumber(oldest[2]) + 60000 - now)}
  end
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
  if used > 0 and used + tonumber(ARGV[5]) > tpm then
    return {'tpm', raw, tostring(first * 1000 + 60000 - now)}
  end
end
local window = 'total'
local period = rec.budget_period
if period == 'daily' then window = ARGV[8]
elseif period == 'weekly' then window = ARGV[9]
elseif period == 'monthly' then window = ARGV[10] end
local budget = val(rec.budget_nanos)
local reserved = '0'
if budget then
  redis.call('ZREMRANGEBYSCORE', rs, '-inf', now)
  local spent = tonumber(redis.call('HGET', KEYS[6], window) or '0')
  local held = 0
  for _, member in ipairs(redis.call('ZRANGE', rs, 0, -1)) do
    held = held + tonumber(string.match(member, ':(%d+)$'))
  end
  if spent + held + tonumber(ARGV[4]) > budget then return {'budget', raw} end
  if tonumber(ARGV[4]) > 0 then
    reserved = ARGV[4]
    redis.call('ZADD', rs, now + tonumber(ARGV[6]), ARGV[7] .. ':' .. ARGV[4])
    redis.call('PEXPIRE', rs, tonumber(ARGV[6]) + 60000)
  end
end
if rpm then
  redis.call('ZADD', rq, now, ARGV[7])
  redis.call('PEXPIRE', rq, 61000)
end
return {'ok', raw, '0', window, reserved}
"""

# KEYS: rs sp tk us of a key, or only us (the master key / an open gateway). ARGV: ticket,
# reserved, cost, input and output tokens, estimated (0/1), model, window, now (ms).
SETTLE = """
local cost = ARGV[3]
local us = KEYS[1]
if #KEYS == 4 then
  us = KEYS[4]
  if ARGV[1] ~= '' then redis.call('ZREM', KEYS[1], ARGV[1] .. ':' .. ARGV[2]) end
  redis.call('HINCRBY', KEYS[2], 'total', cost)
  if ARGV[8] ~= '' and ARGV[8] ~= 'total' then redis.call('HINCRBY', KEYS[2], ARGV[8], cost) end
  local second = tostring(math.floor(tonumber(ARGV[9]) / 1000))
  redis.call('HINCRBY', KEYS[3], second, tonumber(ARGV[4]) + tonumber(ARGV[5]))
  redis.call('PEXPIRE', KEYS[3], 61000)
end
local m = ARGV[7] .. '\\t'
redis.call('HINCRBY', us, m .. 'cost', cost)
redis.call('HINCRBY', us, m .. 'requests', 1)
redis.call('HINCRBY', us, m .. 'in', ARGV[4])
redis.call('HINCRBY', us, m .. 'out', ARGV[5])
redis.call('HINCRBY', us, m .. 'estimated', ARGV[6])
return 1
"""
