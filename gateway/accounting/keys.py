"""Virtual keys: making one (its secret shown once), hashing secrets, static keys from the
config, budget windows, and the admin API's view of a key.

A secret is `sk-gw-` and 256 random bits; only its sha256 is stored. A fast hash is enough
here because the secrets are generated, not chosen: nobody can search 2**256 candidates, so
a slow password hash (bcrypt, argon2: made for low-entropy human passwords) would only add
milliseconds to every request. Static keys from the config may be human-chosen, which is why
they are only ever hashed in memory and never written to the store.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from datetime import UTC
from datetime import datetime
from typing import Any
from typing import Literal

import msgspec

from gateway.accounting.prices import nanos_of_usd
from gateway.accounting.prices import usd
from gateway.config import VirtualKeyConfig
from gateway.errors import BadRequest
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import Period

SECRET_PREFIX = "sk-gw-"
STATIC_ID_PREFIX = "cfg-"


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def new_key_id() -> str:
    return "key_" + secrets.token_hex(8)


def budget_windows(now: float) -> dict[str, str]:
    """The id of the current window of each budget period, in UTC (every request asks;
    the answer changes only when the UTC day does)."""
    day_number = int(now // 86400)
    cached = _windows_cache.get(day_number)
    if cached is not None:
        return cached
    windows = _budget_windows(now)
    _windows_cache.clear()
    _windows_cache[day_number] = windows
    return windows


_windows_cache: dict[int, dict[str, str]] = {}


def _budget_windows(now: float) -> dict[str, str]:
    day = datetime.fromtimestamp(now, UTC)
    year, week, _ = day.isocalendar()
    return {
        "total": "total",
        "daily": day.strftime("d%Y-%m-%d"),
        "weekly": f"w{year}-W{week:02d}",
        "monthly": day.strftime("m%Y-%m"),
    }


def static_keys(keys: list[VirtualKeyConfig]) -> dict[str, KeyRecord]:
    """The config's keys by the hash of their secret; their id is `cfg-<name>`, stable across
    restarts so their spend carries on."""
    out: dict[str, KeyRecord] = {}
    for vk in keys:
        secret_hash = hash_secret(vk.key.reveal())
        out[secret_hash] = KeyRecord(
            id=STATIC_ID_PREFIX + vk.name,
            name=vk.name,
            secret_hash=secret_hash,
            budget_nanos=None if vk.budget_usd is None else nanos_of_usd(vk.budget_usd),
            budget_period="total" if vk.budget_period == "none" else vk.budget_period,
            rpm=vk.rpm,
            tpm=vk.tpm,
            models=list(vk.models) if vk.models is not None else None,
            static=True,
        )
    return out


class NewKey(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """`POST /admin/keys` and `gateway keys create`. `budget_period: none` is `total`."""

    name: str
    budget_usd: float | None = None
    budget_period: Literal["none", "total", "daily", "weekly", "monthly"] = "total"
    rpm: int | None = None
    tpm: int | None = None
    models: list[str] | None = None
    expires_at: str | float | None = None  # ISO 8601 (UTC if no offset) or epoch seconds
    metadata: dict[str, Any] | None = None


def make_key(spec: NewKey, now: float | None = None) -> tuple[KeyRecord, str]:
    """A new key's record and its secret (the only time the secret exists in the clear)."""
    if not spec.name.strip():
        raise BadRequest("'name' must not be empty", param="name")
    if spec.budget_usd is not None and spec.budget_usd < 0:
        raise BadRequest("'budget_usd' must not be negative", param="budget_usd")
    for field in ("rpm", "tpm"):
        value = getattr(spec, field)
        if value is not None and value < 1:
            raise BadRequest(f"'{field}' must be at least 1", param=field)
    if spec.models is not None and any(not m for m in spec.models):
        raise BadRequest("'models' must not contain an empty name", param="models")
    secret = new_secret()
    period: Period = "total" if spec.budget_period == "none" else spec.budget_period
    record = KeyRecord(
        id=new_key_id(),
        name=spec.name,
        secret_hash=hash_secret(secret),
        budget_nanos=None if spec.budget_usd is None else nanos_of_usd(spec.budget_usd),
        budget_period=period,
        rpm=spec.rpm,
        tpm=spec.tpm,
        models=spec.models,
        expires_at=_epoch(spec.expires_at),
        metadata=spec.metadata,
        created_at=time.time() if now is None else now,
    )
    return record, secret


def _epoch(value: str | float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, float | int):
        epoch = float(value)
    else:
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise BadRequest(
                "'expires_at' must be an ISO 8601 date-time or epoch seconds", param="expires_at"
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        epoch = moment.timestamp()
    try:
        _iso(epoch)  # every admin answer shows it as a UTC date: one it cannot show is refused
    except (OverflowError, ValueError, OSError):
        raise BadRequest(
            "'expires_at' is out of range: it must fall in the years 1 to 9999 (UTC)",
            param="expires_at",
        ) from None
    return epoch


def key_view(record: KeyRecord, now: float) -> dict[str, Any]:
    """A key as the admin API shows it: everything but its secret and the secret's hash."""
    expires = record.expires_at
    return {
        "id": record.id,
        "name": record.name,
        "budget_usd": None if record.budget_nanos is None else float(usd(record.budget_nanos)),
        "budget_period": record.budget_period,
        "rpm": record.rpm,
        "tpm": record.tpm,
        "models": record.models,
        "expires_at": None if expires is None else _iso(expires),
        "expired": expires is not None and now >= expires,
        "metadata": record.metadata,
        "created_at": _iso(record.created_at) if record.created_at else None,
        "revoked": record.revoked,
        "static": record.static,
    }


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).isoformat().replace("+00:00", "Z")
