"""OAuth access tokens for Google service-account credentials files (the `vertex` kind).

A token is fetched with google-auth (its HTTP call is blocking, so it runs on a worker
thread, never on the event loop), cached per credentials file, and refreshed once fewer than
five minutes of its life are left; concurrent requests wait for one refresh instead of each
starting their own. Failures become `UpstreamConnectError`s (the next target may work).
"""

from __future__ import annotations

import asyncio
import calendar
import os
import time
from collections.abc import Callable

from gateway.errors import UpstreamConnectError

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
REFRESH_MARGIN_S = 300.0


def fetch_token(credentials_file: str) -> tuple[str, float]:
    """A fresh token and its expiry (unix seconds). Blocking: call it on a worker thread."""
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
        credentials_file, scopes=[CLOUD_PLATFORM]
    )
    credentials.refresh(Request())
    expiry = credentials.expiry  # naive UTC
    expires_at = calendar.timegm(expiry.utctimetuple()) if expiry else time.time() + 3600
    return str(credentials.token), float(expires_at)


class AccessTokens:
    def __init__(
        self,
        fetch: Callable[[str], tuple[str, float]] = fetch_token,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._fetch = fetch
        self._clock = clock
        self._tokens: dict[str, tuple[str, float]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _cached(self, path: str) -> str | None:
        cached = self._tokens.get(path)
        if cached is not None and cached[1] - self._clock() > REFRESH_MARGIN_S:
            return cached[0]
        return None

    async def token(self, credentials_file: str) -> str:
        token = self._cached(credentials_file)
        if token is not None:
            return token
        lock = self._locks.setdefault(credentials_file, asyncio.Lock())
        async with lock:
            token = self._cached(credentials_file)  # another request may have refreshed it
            if token is not None:
                return token
            try:
                fresh, expires_at = await asyncio.to_thread(self._fetch, credentials_file)
            except Exception as exc:  # google-auth raises many kinds; all mean "no token"
                name = os.path.basename(credentials_file)
                raise UpstreamConnectError(
                    f"cannot get an access token with the credentials in {name}: "
                    f"{type(exc).__name__}: {exc}"[:500]
                ) from None
            self._tokens[credentials_file] = (fresh, expires_at)
            return fresh
