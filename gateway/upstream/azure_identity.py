"""Microsoft Entra ID tokens for an `EntraIdentity` key, with azure-identity.

Not `DefaultAzureCredential`: its chain also tries developer tools (Visual Studio Code,
PowerShell, the Azure Developer CLI, a broker) and changes from release to release. The
gateway's chain is fixed, each tried only when the one before it is not configured:

1. `EnvironmentCredential`: a service principal from `AZURE_TENANT_ID`, `AZURE_CLIENT_ID`
   and `AZURE_CLIENT_SECRET` (or `AZURE_CLIENT_CERTIFICATE_PATH`);
2. `WorkloadIdentityCredential`: AKS workload identity (`AZURE_FEDERATED_TOKEN_FILE`,
   `AZURE_CLIENT_ID`, `AZURE_TENANT_ID`, `AZURE_AUTHORITY_HOST`, set by the webhook);
3. `ManagedIdentityCredential`: the VM's, App Service's or Container Apps' managed identity
   (the user-assigned one named by `AZURE_CLIENT_ID` when set);
4. `AzureCliCredential`: `az login` on a developer's machine.

A configured credential that fails (the token endpoint down, a federated token refused)
ends the chain with its error; it does not fall through to the next.

Each fetch builds the chain anew (upstream/credentials.py owns the cache and the refresh
margin, so no token comes back from a library cache near its expiry). Instance discovery is
off: the token comes from the configured authority host alone (no call to the public cloud
from a sovereign or private one). Requests to the authority go through the proxy
egress.proxy_for picks for it (the provider's `proxy`, else the environment, with
no_proxy); the managed identity endpoint is node-local and reached directly.
Blocking: call it on a worker thread.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from gateway.providers.base import BearerToken
from gateway.providers.identity import EntraIdentity
from gateway.upstream.egress import proxy_for

PUBLIC_AUTHORITY = "login.microsoftonline.com"
_WORKLOAD_VARIABLES = ("AZURE_FEDERATED_TOKEN_FILE", "AZURE_CLIENT_ID", "AZURE_TENANT_ID")


def _authority_url() -> str:
    host = os.environ.get("AZURE_AUTHORITY_HOST") or PUBLIC_AUTHORITY
    return host if "://" in host else "https://" + host


def _quiet() -> None:
    """azure-core and msal log token requests and answers at DEBUG: held at WARNING
    whatever `logging.level` says (named by module: the kind's name is not written here)."""
    import azure.core
    import azure.identity
    import msal  # type: ignore[import-untyped]

    for module in (azure.core, azure.identity, msal):
        logging.getLogger(module.__name__).setLevel(logging.WARNING)


def _chain(source: EntraIdentity) -> Any:
    _quiet()
    from azure.identity import AzureCliCredential
    from azure.identity import ChainedTokenCredential
    from azure.identity import EnvironmentCredential
    from azure.identity import ManagedIdentityCredential
    from azure.identity import WorkloadIdentityCredential

    proxy = proxy_for(_authority_url(), source.proxy)
    # an explicit None keeps requests from adding an environment proxy of its own
    proxies = {"http": proxy, "https": proxy}
    direct = {"http": None, "https": None}
    # the authority is trusted as the provider's upstream is (its tls.ca_file, else
    # SSL_CERT_FILE; else requests' own: REQUESTS_CA_BUNDLE or certifi), and asked once per
    # fetch: upstream/credentials.py retries with its own backoff, so azure-core's retries
    # (several seconds on a refused connection) would only hold the request longer
    ca = source.ca_file or os.environ.get("SSL_CERT_FILE") or None
    options: dict[str, Any] = {
        "proxies": proxies,
        "disable_instance_discovery": True,
        "retry_total": 0,
    }
    if ca is not None:
        options["connection_verify"] = ca
    chain: list[Any] = [EnvironmentCredential(**options)]
    if all(os.environ.get(name) for name in _WORKLOAD_VARIABLES):
        chain.append(WorkloadIdentityCredential(**options))
    chain.append(
        ManagedIdentityCredential(
            client_id=os.environ.get("AZURE_CLIENT_ID"), proxies=direct, retry_total=0
        )
    )
    chain.append(AzureCliCredential())
    return ChainedTokenCredential(*chain)


def fetch_entra_token(source: EntraIdentity) -> BearerToken:
    """A fresh token for `source.scope`."""
    chain = _chain(source)
    try:
        token = chain.get_token(source.scope)
    finally:
        chain.close()
    return BearerToken(token=token.token, expires_at=float(token.expires_on))
