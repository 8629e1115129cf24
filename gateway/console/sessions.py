"""Console sessions: signed in with the master key, kept in the configured store.

A session is a random 256-bit token in an HttpOnly cookie. The store keeps, under the token's
sha256 (never the token), the session's CSRF token, its expiry and a fingerprint of the
master key it was opened with: a session ends at its expiry, at sign-out, or when the master
key changes. Failed sign-ins are counted per client address (`SignInThrottle`), in this
process.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections import OrderedDict

import msgspec

from gateway.store.kv import KeyValueStore

COOKIE = "gw_console"
_PREFIX = "console:session:"
MAX_FAILURES = 10  # failed sign-ins from one address within the window: then 429
FAILURE_WINDOW_S = 300.0
MAX_TRACKED_ADDRESSES = 10_000  # the throttle's memory is bounded too


class Session(msgspec.Struct, frozen=True):
    csrf: str
    expires_at: float  # unix seconds
    master: str  # fingerprint of the master key the session was opened with


_encode = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder(Session).decode


def fingerprint(master_key: str) -> str:
    return hashlib.sha256(b"gateway-console:" + master_key.encode()).hexdigest()[:32]


def _store_key(token: str) -> str:
    return _PREFIX + hashlib.sha256(token.encode()).hexdigest()


def master_matches(presented: str, master_key: str) -> bool:
    """Constant time: the presented key's length and contents reveal nothing."""
    given = hashlib.sha256(presented.encode()).digest()
    wanted = hashlib.sha256(master_key.encode()).digest()
    return hmac.compare_digest(given, wanted)


async def open_session(kv: KeyValueStore, master_key: str, ttl_s: float) -> tuple[str, Session]:
    """A new session: (the cookie's token, what the store keeps of it)."""
    token = secrets.token_urlsafe(32)
    session = Session(
        csrf=secrets.token_urlsafe(32),
        expires_at=round(time.time() + ttl_s, 3),
        master=fingerprint(master_key),
    )
    await kv.put(_store_key(token), _encode(session), ttl_s)
    return token, session


async def find_session(kv: KeyValueStore, token: str | None, master_key: str) -> Session | None:
    """The session of `token` when it is live and was opened with today's master key."""
    if not token or len(token) > 100 or not master_key:
        return None
    raw = await kv.get(_store_key(token))
    if not raw:
        return None
    try:
        session = _decode(raw)
    except msgspec.DecodeError:
        return None
    if session.expires_at <= time.time():
        return None
    if not hmac.compare_digest(session.master, fingerprint(master_key)):
        return None  # the master key changed since: everyone signs in again
    return session


async def close_session(kv: KeyValueStore, token: str) -> None:
    await kv.put(_store_key(token), b"", 0)  # a put with no time to live removes the key


def csrf_matches(session: Session, presented: str | None) -> bool:
    return presented is not None and hmac.compare_digest(session.csrf, presented)


class SignInThrottle:
    """Failed sign-ins per client address within a sliding window (this process's)."""

    def __init__(self) -> None:
        self._failures: OrderedDict[str, list[float]] = OrderedDict()

    def retry_after_s(self, address: str, now: float) -> float:
        """0 when `address` may try now, else how long until it may."""
        times = self._recent(address, now)
        if len(times) < MAX_FAILURES:
            return 0.0
        return max(times[0] + FAILURE_WINDOW_S - now, 1.0)

    def failed(self, address: str, now: float) -> None:
        times = self._recent(address, now)
        times.append(now)
        self._failures[address] = times
        self._failures.move_to_end(address)
        while len(self._failures) > MAX_TRACKED_ADDRESSES:
            self._failures.popitem(last=False)

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)

    def _recent(self, address: str, now: float) -> list[float]:
        times = self._failures.get(address)
        if not times:
            return []
        return [t for t in times if t > now - FAILURE_WINDOW_S]
