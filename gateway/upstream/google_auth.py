"""Google service-account OAuth tokens (`GoogleServiceAccount`), fetched with google-auth.

A credential mechanism, not a provider kind: any adapter whose upstream takes a Google
OAuth token declares the source, and upstream/credentials.py calls the fetcher here.
"""

from __future__ import annotations

import calendar
import time

from gateway.providers.base import GoogleServiceAccount

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


def fetch_service_account_token(source: GoogleServiceAccount) -> tuple[str, float]:
    """A fresh token and its expiry (unix seconds). Blocking: call it on a worker thread."""
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
        source.key_file, scopes=[CLOUD_PLATFORM]
    )
    credentials.refresh(Request())
    expiry = credentials.expiry  # naive UTC
    expires_at = calendar.timegm(expiry.utctimetuple()) if expiry else time.time() + 3600
    return str(credentials.token), float(expires_at)
