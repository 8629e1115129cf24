"""The `vertex` kind: Gemini models on Google Cloud Vertex AI.

The request body, the stream and the answers are Gemini's (providers/gemini/adapter.py);
only the URL (project, region, publisher model: `VertexProvider.models_url`) and the
credential differ: an OAuth access token, from a service-account credentials file
(`GoogleServiceAccount`) or from Application Default Credentials for an `identity: default`
key (`GoogleIdentity`, optionally impersonating a service account), fetched and cached by
upstream/credentials.py from the source the adapter declares, handed in as
`call.credential`. Sans-IO.
"""

from __future__ import annotations

from gateway.config_base import ProviderKey
from gateway.errors import UpstreamConnectError
from gateway.providers.base import GoogleServiceAccount
from gateway.providers.base import TokenSource
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.gemini.adapter import GeminiAdapter
from gateway.providers.gemini.adapter import bearer_headers
from gateway.providers.identity import GoogleIdentity
from gateway.providers.identity import configured_proxy
from gateway.providers.vertex.config import VertexKey
from gateway.providers.vertex.config import VertexProvider


def vertex_source(provider: VertexProvider, key: ProviderKey | None) -> TokenSource:
    """A vertex key's credential (chat and embeddings alike): Application Default
    Credentials for an identity key, else its service-account file."""
    if isinstance(key, VertexKey) and key.cloud_identity is not None:
        return GoogleIdentity(
            target_principal=key.impersonate,
            iam_base_url=key.iam_endpoint,
            proxy=configured_proxy(provider),
        )
    if not isinstance(key, VertexKey) or not key.credentials_file:
        raise UpstreamConnectError("the Vertex AI key has no credentials_file")
    return GoogleServiceAccount(key.credentials_file)


class VertexAdapter(GeminiAdapter):
    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return vertex_source(self._vertex, key)

    def __init__(self, provider: VertexProvider) -> None:
        self._vertex = provider
        self._base = provider.models_url()

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        request = super().build_request(call)
        request.headers.pop("x-goog-api-key", None)
        request.headers.update(bearer_headers(call.credential, "the Vertex AI credentials"))
        return request
