"""The accounting store: virtual keys, budgets, rate-limit windows and spend, behind one
narrow async interface with three backends (memory, sqlite, redis) chosen by `store.url`.

The hot path makes two calls per request and no more: `admit` before the upstream request
(finds the key by the hash of its secret, checks revocation, expiry, allowed models, the rpm
and tpm windows and the budget, and reserves, all in one atomic step) and `settle` (or
`release`) after the answer. Everything else is the admin API's.

Amounts are integer nanodollars. A reservation lives `hold_s` at most: one whose request
died with its process (SIGKILL) stops holding budget then, without anyone releasing it.
Every method raises StoreUnavailable (gateway/store/kv.py) when the store does not answer.
"""

from __future__ import annotations

from typing import Any
from typing import Literal
from typing import Protocol

import msgspec

from gateway.store.kv import SQLITE_PREFIX
from gateway.store.kv import STORE_FORMS
from gateway.store.kv import StoreMisconfigured
from gateway.store.kv import sqlite_path
from gateway.store.kv import store_problem

Period = Literal["total", "daily", "weekly", "monthly"]
Verdict = Literal["ok", "unknown", "revoked", "expired", "model", "rpm", "tpm", "budget"]
WINDOW_S = 60.0  # rpm and tpm are sliding one-minute windows


class KeyRecord(msgspec.Struct, kw_only=True):
    """A virtual key as stored: never its secret, only the secret's sha256 (hex)."""

    id: str
    name: str
    secret_hash: str
    budget_nanos: int | None = None
    budget_period: Period = "total"
    rpm: int | None = None
    tpm: int | None = None
    models: list[str] | None = None  # None: every model
    expires_at: float | None = None  # epoch seconds
    metadata: dict[str, Any] | None = None
    created_at: float = 0.0
    revoked: bool = False
    static: bool = False  # from the config file: not stored, never revoked by the API


class Admission(msgspec.Struct, kw_only=True):
    """What `admit` is asked: the key (by `secret_hash`, or a static key's `record`), the
    model requested, the reservation and the estimated tokens for the tpm window."""

    ticket: str
    now: float
    model: str
    reserve_nanos: int
    tokens: int
    hold_s: float
    windows: dict[str, str]  # period -> the current budget window's id
    secret_hash: str = ""
    record: KeyRecord | None = None


class Admitted(msgspec.Struct, kw_only=True):
    """`admit`'s answer: the verdict, the key found, and when to retry a rate limit."""

    verdict: Verdict
    record: KeyRecord | None = None
    retry_after_s: float = 0.0
    window: str = ""  # the budget window charged (settle charges the same one)
    reserved_nanos: int = 0


class Charge(msgspec.Struct, kw_only=True):
    """One request's cost, settled: the key's reservation (if any) is replaced by it."""

    key_id: str  # "" for the master key or an open gateway
    model: str
    cost_nanos: int
    input_tokens: int
    output_tokens: int
    estimated: bool
    now: float
    ticket: str = ""
    window: str = ""
    reserved_nanos: int = 0


class SpendRow(msgspec.Struct, kw_only=True):
    """Everything spent by one key (`""`: master key / open gateway) on one model."""

    key_id: str
    model: str
    cost_nanos: int = 0
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    estimated: int = 0  # requests whose usage was estimated
    cache_hits: int = 0  # answered from the response cache (not in `requests`: cost 0)
    cache_saved_nanos: int = 0  # what those hits would have cost


class CacheHits(msgspec.Struct, kw_only=True):
    """Response-cache hits of one key (`""`: master key / open gateway) on one model, and
    what the upstream answers they replayed had cost."""

    key_id: str
    model: str
    hits: int
    saved_nanos: int


class KeySpend(msgspec.Struct, kw_only=True):
    total_nanos: int = 0
    window_nanos: int = 0  # in the budget window asked about
    reserved_nanos: int = 0  # held by requests in flight


class Ledger(Protocol):
    async def admit(self, ask: Admission) -> Admitted: ...

    async def settle(self, charge: Charge) -> None: ...

    async def release(self, key_id: str, ticket: str, reserved_nanos: int) -> None: ...

    async def create_key(self, record: KeyRecord) -> None: ...

    async def find_key(self, secret_hash: str) -> KeyRecord | None: ...

    async def get_key(self, key_id: str) -> KeyRecord | None: ...

    async def list_keys(self) -> list[KeyRecord]: ...

    async def revoke_key(self, key_id: str) -> bool:
        """True if the key existed (revoked now or before)."""
        ...

    async def key_spend(self, key_id: str, window: str, now: float) -> KeySpend: ...

    async def count_hits(self, hits: list[CacheHits]) -> None:
        """Adds response-cache hits to the spend rows (their `cache_*` fields)."""
        ...

    async def spend(self) -> list[SpendRow]: ...

    async def close(self) -> None: ...


def judge(
    record: KeyRecord,
    ask: Admission,
    *,
    rpm_count: int,
    rpm_oldest: float | None,
    tpm_used: int,
    tpm_oldest: float | None,
    spent: int,
    held: int,
) -> tuple[Verdict, float]:
    """The verdict on one admission from the key's current counters, and the seconds
    until a rate-limited request could pass (the redis script mirrors this)."""
    now = ask.now
    if record.revoked:
        return "revoked", 0.0
    if record.expires_at is not None and now >= record.expires_at:
        return "expired", 0.0
    if record.models is not None and ask.model not in record.models:
        return "model", 0.0
    if record.rpm is not None and rpm_count >= record.rpm:
        return "rpm", _until_out((rpm_oldest or now) + WINDOW_S - now)
    # tokens are counted when settled; one request alone is never refused for its size
    if record.tpm is not None and tpm_used > 0 and tpm_used + ask.tokens > record.tpm:
        return "tpm", _until_out((tpm_oldest or now) + WINDOW_S - now)
    if record.budget_nanos is not None and spent + held + ask.reserve_nanos > record.budget_nanos:
        return "budget", 0.0
    return "ok", 0.0


def _until_out(seconds: float) -> float:
    return max(seconds, 0.001)


def window_of(record: KeyRecord, windows: dict[str, str]) -> str:
    return windows.get(record.budget_period, "total")


record_encoder = msgspec.json.Encoder()
record_decoder = msgspec.json.Decoder(KeyRecord)


def make_ledger(url: str) -> Ledger:
    """The accounting backend for a validated `store.url`; like `make_kv`, it connects on
    first use. Raises StoreMisconfigured for a URL that cannot work."""
    scheme = url.partition("://")[0].lower()
    if scheme == "memory":
        from gateway.store.memory_ledger import MemoryLedger

        return MemoryLedger()
    if url.startswith(SQLITE_PREFIX):
        problem = store_problem(url)
        if problem:
            raise StoreMisconfigured(f"store.url: {problem}")
        from gateway.store.sqlite_ledger import SqliteLedger

        return SqliteLedger(sqlite_path(url))
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        from gateway.store.redis_ledger import RedisLedger

        return RedisLedger(url)
    raise StoreMisconfigured(f"store.url: expected {STORE_FORMS}")
