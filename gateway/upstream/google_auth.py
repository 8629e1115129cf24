"""Google OAuth tokens, fetched with google-auth: a service-account file
(`GoogleServiceAccount`) or Application Default Credentials (`GoogleIdentity`).

A credential mechanism, not a provider kind: any adapter whose upstream takes a Google
OAuth token declares the source, and upstream/credentials.py calls the fetcher here.

Application Default Credentials are google-auth's own `google.auth.default()`, in its
order: `GOOGLE_APPLICATION_CREDENTIALS` (a service-account or external-account file:
workload identity federation from AWS, Azure or any OIDC issuer), gcloud's ADC file, then
the metadata server (GCE, Cloud Run, GKE Workload Identity; `GCE_METADATA_HOST`). With
`impersonate` those credentials then ask the IAM Credentials API for a token of that
service account (`impersonated_credentials`: the caller needs
roles/iam.serviceAccountTokenCreator on it).

Each fetch builds the credentials anew (credentials.py owns the cache and the refresh
margin). Token requests go through a requests session whose proxy is chosen per URL by
egress.proxy_for (the provider's `proxy` setting, else the environment, with no_proxy),
except the metadata server's, which is node-local and always reached directly.
Blocking: call it on a worker thread.
"""

from __future__ import annotations

import calendar
import os
import time
from typing import Any
from urllib.parse import quote
from urllib.parse import urlsplit

import requests

from gateway.providers.base import BearerToken
from gateway.providers.base import GoogleServiceAccount
from gateway.providers.identity import CLOUD_PLATFORM
from gateway.providers.identity import GoogleIdentity
from gateway.upstream.egress import proxy_for

IMPERSONATED_LIFETIME_S = 3600
_METADATA_HOSTS = frozenset({"metadata.google.internal", "metadata", "169.254.169.254"})


class _EgressSession(requests.Session):
    """A requests session that sends each request through the proxy egress.proxy_for picks
    for its URL (None: directly), instead of requests' own reading of the environment."""

    def __init__(self, configured: str | None) -> None:
        super().__init__()
        self._configured = configured
        self._direct = set(_METADATA_HOSTS)
        for name in ("GCE_METADATA_HOST", "GCE_METADATA_IP"):
            host = os.environ.get(name)
            if host:
                self._direct.add(urlsplit("//" + host).hostname or host)

    def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
        text = url.decode() if isinstance(url, bytes) else url
        host = urlsplit(text).hostname or ""
        proxy = None if host in self._direct else proxy_for(text, self._configured)
        # an explicit None keeps requests from adding an environment proxy of its own
        kwargs["proxies"] = {"http": proxy, "https": proxy}
        return super().request(method, url, *args, **kwargs)


def _token(credentials: Any) -> BearerToken:
    expiry = credentials.expiry  # naive UTC
    expires_at = calendar.timegm(expiry.utctimetuple()) if expiry else time.time() + 3600
    return BearerToken(
        token=str(credentials.token),
        expires_at=float(expires_at),
        quota_project=getattr(credentials, "quota_project_id", None) or None,
    )


def fetch_service_account_token(source: GoogleServiceAccount) -> BearerToken:
    """A fresh token for a service-account file."""
    from google.auth.transport.requests import Request
    from google.oauth2 import service_account

    credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
        source.key_file, scopes=[CLOUD_PLATFORM]
    )
    credentials.refresh(Request())
    return _token(credentials)


def _iam_token_url(source: GoogleIdentity) -> str | None:
    """generateAccessToken of the impersonated account at the configured IAM endpoint
    (None: google-auth's own, iamcredentials.googleapis.com)."""
    if not source.iam_base_url or not source.target_principal:
        return None
    account = quote(source.target_principal, safe="@")
    return (
        f"{source.iam_base_url.rstrip('/')}/v1/projects/-/serviceAccounts/{account}"
        ":generateAccessToken"
    )


def fetch_default_token(source: GoogleIdentity) -> BearerToken:
    """A fresh token from Application Default Credentials (or the account they impersonate)."""
    import google.auth
    from google.auth import impersonated_credentials
    from google.auth.credentials import with_scopes_if_required
    from google.auth.transport.requests import Request

    with _EgressSession(source.proxy) as session:
        request = Request(session)
        scopes = list(source.scopes)
        # Scopes are applied after: given to default(), an external account (workload
        # identity federation) spends a token and a call to Cloud Resource Manager on a
        # project id the gateway never uses, and fails where that API is not reachable.
        credentials, _ = google.auth.default(request=request)
        credentials = with_scopes_if_required(credentials, scopes)  # type: ignore[no-untyped-call]
        if source.target_principal:
            credentials = impersonated_credentials.Credentials(  # type: ignore[no-untyped-call]
                source_credentials=credentials,
                target_principal=source.target_principal,
                target_scopes=scopes,
                lifetime=IMPERSONATED_LIFETIME_S,
                iam_endpoint_override=_iam_token_url(source),
            )
        credentials.refresh(request)
        return _token(credentials)
