"""Credentials for the token sources adapters declare (`TokenSource`): bearer tokens and
AWS credentials, fetched off the event loop, cached, refreshed before they expire.

An adapter says what a key needs (`token_source(key)`: a sans-IO description such as
`GoogleServiceAccount(key_file)` or `AwsIdentity(...)`); this module maps each source type
to its blocking fetcher (`FETCHERS`: one entry per credential mechanism, each returning a
typed `Credential`), runs the fetch on a worker thread (never on the event loop) and keeps
one entry per source:

- fresh until `refresh_at`: `expires_at - margin_s`, but never sooner than half of the
  credential's remaining life from when it was fetched (a library that hands back a
  cached token close to its expiry must not make every request fetch again);
- one refresh at a time per source: concurrent requests wait for it (a lock per source)
  and are served what it got;
- a failed fetch is retried with backoff (`retry_first_s`, doubling up to `retry_max_s`):
  until then requests are answered from the last credential while it has not expired,
  else refused at once with the last failure, without a fetch per request;
- a source that cannot give a credential raises `CredentialsUnavailable`, an
  `UpstreamConnectError` whose message names the source (`TokenSource.label()`) and the
  library's reason with anything token-like cut out; key health opens the key's circuit
  at once (upstream/outcome.py) and the attempt runner moves on to the next key.

One `AccessTokens` per worker process (on the GatewayState). Credentials are never logged:
their repr shows none of their secrets, and errors are scrubbed.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.errors import UpstreamConnectError
from gateway.providers.base import Credential
from gateway.providers.base import GoogleServiceAccount
from gateway.providers.base import TokenSource
from gateway.providers.identity import AwsIdentity
from gateway.providers.identity import EntraIdentity
from gateway.providers.identity import GoogleIdentity
from gateway.upstream.aws_identity import fetch_aws_credentials
from gateway.upstream.azure_identity import fetch_entra_token
from gateway.upstream.google_auth import fetch_default_token
from gateway.upstream.google_auth import fetch_service_account_token

REFRESH_MARGIN_S = 300.0  # refresh once fewer than five minutes of a credential's life are left
RETRY_FIRST_S = 1.0  # a failed fetch is tried again after this, doubling per failure
RETRY_MAX_S = 60.0
EXPIRY_SKEW_S = 10.0  # a credential this close to its expiry is not sent (it may lapse in flight)

# A blocking fetch of a fresh credential for one source.
Fetcher = Callable[[Any], Credential]

FETCHERS: Mapping[type[TokenSource], Fetcher] = MappingProxyType(
    {
        GoogleServiceAccount: fetch_service_account_token,
        GoogleIdentity: fetch_default_token,
        AwsIdentity: fetch_aws_credentials,
        EntraIdentity: fetch_entra_token,
    }
)

# Runs that read as a token, a key or a signature (JWTs, AWS secrets and session tokens,
# base64 blobs): cut out of a library's error before it becomes a message. Ids (ARNs,
# GUIDs, account numbers, host names) are shorter or broken up by `:`, and stay.
_OPAQUE = re.compile(r"[A-Za-z0-9+/=_.~\-]{40,}")  # `~`: Entra client secrets have one


class CredentialsUnavailable(UpstreamConnectError):
    """A key's credential could not be obtained (its token endpoint down, refused, or no
    identity configured where the gateway runs): nothing was sent upstream."""

    code = "credentials_unavailable"


def scrubbed(text: str, limit: int = 400) -> str:
    """`text` (a library's error) without anything token-like, on one line, bounded."""
    return " ".join(_OPAQUE.sub("[redacted]", text).split())[:limit]


class _Entry:
    __slots__ = ("credential", "failures", "problem", "refresh_at", "retry_at")

    def __init__(self) -> None:
        self.credential: Credential | None = None
        self.refresh_at = 0.0  # unix seconds: past it, the next request refreshes
        self.failures = 0  # consecutive failed fetches
        self.retry_at = 0.0  # no fetch before this after a failure
        self.problem = ""  # the last failure's message


class AccessTokens:
    """The process's credential cache (one per worker, on the GatewayState)."""

    def __init__(
        self,
        fetchers: Mapping[type[TokenSource], Fetcher] = FETCHERS,
        clock: Callable[[], float] = time.time,
        *,
        margin_s: float = REFRESH_MARGIN_S,
        retry_first_s: float = RETRY_FIRST_S,
        retry_max_s: float = RETRY_MAX_S,
        skew_s: float = EXPIRY_SKEW_S,
    ) -> None:
        self._fetchers = fetchers
        self._clock = clock
        self._margin_s = margin_s
        self._retry_first_s = retry_first_s
        self._retry_max_s = retry_max_s
        self._skew_s = skew_s
        self._entries: dict[TokenSource, _Entry] = {}
        self._locks: dict[TokenSource, asyncio.Lock] = {}

    def _usable(self, entry: _Entry, now: float) -> Credential | None:
        """The entry's credential while it may still be sent (not about to expire)."""
        credential = entry.credential
        if credential is not None and credential.expires_at - now > self._skew_s:
            return credential
        return None

    async def credential(self, source: TokenSource) -> Credential:
        """A credential for `source` that is not about to expire; raises
        `CredentialsUnavailable` when none can be had."""
        entry = self._entries.get(source)
        if entry is not None and entry.credential is not None and self._clock() < entry.refresh_at:
            return entry.credential
        fetch = self._fetchers.get(type(source))
        if fetch is None:
            raise CredentialsUnavailable(
                f"no way to get a credential from {type(source).__name__} ({source.label()})"
                " in this build"
            )
        entry = self._entries.setdefault(source, _Entry())
        lock = self._locks.setdefault(source, asyncio.Lock())
        async with lock:
            now = self._clock()
            if entry.credential is not None and now < entry.refresh_at:
                return entry.credential  # another request refreshed it while this one waited
            if now < entry.retry_at:
                return self._fallback(entry, source, now)
            try:
                fresh = await asyncio.to_thread(fetch, source)
            except Exception as exc:  # the libraries raise many kinds; all mean "no credential"
                now = self._clock()
                entry.failures += 1
                backoff = self._retry_first_s * 2.0 ** min(entry.failures - 1, 16)
                entry.retry_at = now + min(backoff, self._retry_max_s)
                entry.problem = scrubbed(f"{type(exc).__name__}: {exc}")
                return self._fallback(entry, source, now)
            now = self._clock()
            left = fresh.expires_at - now
            entry.credential = fresh
            entry.refresh_at = max(fresh.expires_at - self._margin_s, now + left / 2)
            entry.failures, entry.retry_at, entry.problem = 0, 0.0, ""
            return fresh

    def _fallback(self, entry: _Entry, source: TokenSource, now: float) -> Credential:
        """After a failed refresh: the last credential while it lasts, else the failure."""
        usable = self._usable(entry, now)
        if usable is not None:
            return usable
        raise CredentialsUnavailable(
            f"cannot get a credential from {source.label()}: {entry.problem}"
            f" (tried {entry.failures} time{'s' if entry.failures != 1 else ''}; next try in"
            f" {max(entry.retry_at - now, 0.0):.1f}s)"
        )
