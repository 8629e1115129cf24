"""Access tokens for the credential sources adapters declare (`TokenSource`).

An adapter says what a key needs (`token_source(key)`: a sans-IO description such as
`GoogleServiceAccount(key_file)`); this module maps each source type to its
blocking fetcher (`FETCHERS`: one entry per credential mechanism), runs the fetch on a
worker thread (never on the event loop), caches the token per source, and refreshes it once
fewer than five minutes of its life are left; concurrent requests wait for one refresh
instead of each starting their own. Failures become `UpstreamConnectError`s (the next target
may work).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gateway.errors import UpstreamConnectError
from gateway.providers.base import GoogleServiceAccount
from gateway.providers.base import TokenSource
from gateway.upstream.google_auth import fetch_service_account_token

REFRESH_MARGIN_S = 300.0

# A blocking fetch of a fresh token and its expiry (unix seconds) for one source.
Fetcher = Callable[[Any], tuple[str, float]]

FETCHERS: Mapping[type[TokenSource], Fetcher] = MappingProxyType(
    {GoogleServiceAccount: fetch_service_account_token}
)


class AccessTokens:
    """The process's token cache (one per worker, on the GatewayState)."""

    def __init__(
        self,
        fetchers: Mapping[type[TokenSource], Fetcher] = FETCHERS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetchers = fetchers
        self._clock = clock
        self._tokens: dict[TokenSource, tuple[str, float]] = {}
        self._locks: dict[TokenSource, asyncio.Lock] = {}

    def _cached(self, source: TokenSource) -> str | None:
        cached = self._tokens.get(source)
        if cached is not None and cached[1] - self._clock() > REFRESH_MARGIN_S:
            return cached[0]
        return None

    async def token(self, source: TokenSource) -> str:
        token = self._cached(source)
        if token is not None:
            return token
        fetch = self._fetchers.get(type(source))
        if fetch is None:
            raise UpstreamConnectError(
                f"no way to get an access token from {type(source).__name__} in this build"
            )
        lock = self._locks.setdefault(source, asyncio.Lock())
        async with lock:
            token = self._cached(source)  # another request may have refreshed it
            if token is not None:
                return token
            try:
                fresh, expires_at = await asyncio.to_thread(fetch, source)
            except Exception as exc:  # google-auth raises many kinds; all mean "no token"
                raise UpstreamConnectError(
                    f"cannot get an access token with {source.label()}: "
                    f"{type(exc).__name__}: {exc}"[:500]
                ) from None
            self._tokens[source] = (fresh, expires_at)
            return fresh
