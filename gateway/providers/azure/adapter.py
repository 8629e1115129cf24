"""Azure OpenAI: Chat Completions against an Azure OpenAI (or AI Foundry) resource.

Sans-IO. The body, the stream translator and the answer are the OpenAI adapter's: Azure
speaks the same Chat Completions wire format, with extra fields (`prompt_filter_results`,
`content_filter_results`) that are passed through untouched. What differs is where the
request goes and how it is authenticated (docs/providers.md, "Azure OpenAI"):

- deployment path (a dated `api_version` such as `2024-10-21`):
  `{base_url}/openai/deployments/{deployment}/chat/completions?api-version={api_version}`,
  the deployment being the target's upstream model, URL-quoted; the body keeps `model` set
  to the same name (Azure ignores it);
- v1 path (`api_version` `v1` or `preview`, or a `base_url` ending in `/openai/v1`):
  `{base_url}/openai/v1/chat/completions`, `?api-version=preview` only for `preview`, the
  model in the body.

A target with `api: responses` calls Azure's Responses API instead, with the deployment
in the body's `model` (Azure's Responses API has no deployment segment in its path):
`{base_url}/openai/v1/responses` on the v1 path (`?api-version=preview` for `preview`), and
`{base_url}/openai/responses?api-version={api_version}` otherwise (a dated version that has
the Responses API: `2025-03-01-preview` or later).

The provider key goes in the `api-key` header, never in `Authorization`; an `identity:
default` key sends a Microsoft Entra ID token (fetched for its `EntraIdentity`) as
`Authorization: Bearer` instead.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.config_base import ProviderKey
from gateway.errors import UpstreamError
from gateway.providers.azure.config import AzureProvider
from gateway.providers.azure.urls import AzureUrls
from gateway.providers.azure.urls import auth_headers
from gateway.providers.azure.urls import azure_source
from gateway.providers.base import TokenSource
from gateway.providers.base import UpstreamCall
from gateway.providers.base import UpstreamRequest
from gateway.providers.base import context_window_error
from gateway.providers.openai.adapter import OPENAI_CODES
from gateway.providers.openai.adapter import OPENAI_CONTEXT
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.adapter import error_from_body
from gateway.providers.openai.adapter import upstream_body


class AzureAdapter(OpenAIAdapter):
    """The OpenAI adapter with Azure's URLs and `api-key` authentication."""

    def __init__(self, provider: AzureProvider) -> None:
        self._provider = provider
        self.urls = AzureUrls(provider)

    def token_source(self, key: ProviderKey | None) -> TokenSource | None:
        return azure_source(self._provider, key)

    def url(self, call: UpstreamCall) -> str:
        if call.api == "responses":
            return self.urls.responses
        return self.urls.of("chat/completions", call.model)

    def build_request(self, call: UpstreamCall) -> UpstreamRequest:
        headers = auth_headers(call.key, call.credential)
        if call.stream:
            headers["Accept"] = "text/event-stream"
        return UpstreamRequest(url=self.url(call), headers=headers, body=upstream_body(call))

    def error_from_response(
        self, status: int, body: bytes, headers: Mapping[str, str]
    ) -> UpstreamError:
        err = context_window_error(error_from_body(status, body), OPENAI_CONTEXT, OPENAI_CODES)
        # Azure's errors often say `"type": null` (content_filter, DeploymentNotFound): a
        # client-fault answer then reads as OpenAI's would.
        if not err.retryable and 400 <= status < 500 and err.type == "upstream_error":
            err.type = "invalid_request_error"
        return err
