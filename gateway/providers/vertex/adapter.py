"""The `vertex` kind: Gemini models on Google Cloud Vertex AI.

The request body, the stream and the answers are Gemini's (providers/gemini/adapter.py);
only the URL (project, region, publisher model: `VertexProvider.models_url`) and the
credential differ: an OAuth access token from a service-account credentials file, fetched
and cached by upstream/credentials.py from the `GoogleServiceAccount` the adapter declares,
handed in as `call.access_token`.
Sans-IO.
"""

from __future__ import annotations

from gateway.config_base import ProviderKey
from gateway.errors import UpstreamConnectError
from gateway.providers.base import GoogleServiceAccount
from gateway.providers.base import TokenSource
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.gemini.adapter import GeminiAdapter
from gateway.providers.vertex.config import VertexKey
from gateway.providers.vertex.config import VertexProvider


def service_account(key: ProviderKey | None) -> GoogleServiceAccount:
    """A vertex key's credential: an OAuth token for its service-account file (chat and
    embeddings alike)."""
    if not isinstance(key, VertexKey) or not key.credentials_file:
        raise UpstreamConnectError("the Vertex AI key has no credentials_file")
    return GoogleServiceAccount(key.credentials_file)


class VertexAdapter(GeminiAdapter):
    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return service_account(key)

    def __init__(self, provider: VertexProvider) -> None:
        self._base = provider.models_url()

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        if not call.access_token:
            raise UpstreamConnectError("no access token for the Vertex AI credentials")
        request = super().build_request(call)
        request.headers.pop("x-goog-api-key", None)
        request.headers["Authorization"] = "Bearer " + call.access_token
        return request
