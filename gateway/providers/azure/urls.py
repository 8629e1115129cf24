"""Where an Azure OpenAI resource takes each operation, and its credential headers: the key
in `api-key`, or an `identity: default` key's Microsoft Entra ID token as a bearer
(`EntraIdentity`, the scope `https://cognitiveservices.azure.com/.default`). Sans-IO.

- deployment path (a dated `api_version` such as `2024-10-21`):
  `{root}/openai/deployments/{deployment}/{operation}?api-version={api_version}`, the
  deployment being the target's upstream model, one escaped path segment;
- v1 path (`api_version` `v1` or `preview`, or a `base_url` ending in `/openai/v1`):
  `{root}/openai/v1/{operation}`, `?api-version=preview` only for `preview`, the model in
  the body.

The Responses API has no deployment segment on either: `{root}/openai/v1/responses` on the
v1 path, `{root}/openai/responses?api-version={api_version}` otherwise.
"""

from __future__ import annotations

from urllib.parse import quote

from gateway.config_base import ProviderKey
from gateway.config_base import effective_base_url
from gateway.providers.azure.config import AzureKey
from gateway.providers.azure.config import AzureProvider
from gateway.providers.base import Credential
from gateway.providers.base import TokenSource
from gateway.providers.base import bearer_token
from gateway.providers.base import path_segment
from gateway.providers.identity import EntraIdentity
from gateway.providers.identity import configured_proxy

V1_VERSIONS = frozenset({"v1", "preview"})


class AzureUrls:
    __slots__ = ("_prefix", "_query", "_root", "responses", "v1")

    def __init__(self, provider: AzureProvider) -> None:
        base = effective_base_url(provider)
        version = provider.api_version.strip()
        if base.endswith("/openai/v1"):
            root, v1 = base.removesuffix("/openai/v1"), True
        else:
            # `https://x.openai.azure.com/openai` and `https://x.openai.azure.com` are the same
            # resource: the `/openai` segment is added below either way.
            root, v1 = base.removesuffix("/openai"), version.lower() in V1_VERSIONS
        self.v1 = v1
        if v1:
            # The v1 API takes no dated api-version; `preview` opts into preview features.
            self._query = "?api-version=preview" if version.lower() == "preview" else ""
            self._prefix = root + "/openai/v1/"
            self.responses = self._prefix + "responses" + self._query
        else:
            self._query = "?api-version=" + quote(version, safe="")
            self._prefix = root + "/openai/deployments/"
            self.responses = root + "/openai/responses" + self._query

    def of(self, operation: str, deployment: str) -> str:
        """The URL of `operation` (`chat/completions`, `embeddings`) for `deployment`."""
        if self.v1:
            return self._prefix + operation + self._query
        return f"{self._prefix}{path_segment(deployment)}/{operation}{self._query}"


def azure_source(provider: AzureProvider, key: ProviderKey | None) -> TokenSource | None:
    """An identity key's Entra ID token (chat, Responses and embeddings alike); None for an
    api key, sent as it is."""
    if isinstance(key, AzureKey) and key.cloud_identity is not None:
        tls = provider.tls
        return EntraIdentity(
            proxy=configured_proxy(provider), ca_file=tls.ca_file if tls is not None else None
        )
    return None


def auth_headers(key: ProviderKey | None, credential: Credential | None) -> dict[str, str]:
    """JSON content and the key in `api-key` (an api key is never sent in `Authorization`),
    or an identity key's Entra ID token in `Authorization: Bearer`."""
    headers = {"Content-Type": "application/json"}
    if isinstance(key, AzureKey) and key.cloud_identity is not None:
        token = bearer_token(credential, "the Microsoft Entra ID identity")
        headers["Authorization"] = "Bearer " + token.token
    elif key is not None and key.key:
        headers["api-key"] = key.key.reveal()
    return headers
