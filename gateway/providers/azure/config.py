"""The `azure` provider's config: the resource's `base_url` and `api_version` (a dated
version, `v1` or `preview`), an api key (`api-key`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

from gateway.config_base import ProviderBase
from gateway.config_parse import Problem


class AzureProvider(
    ProviderBase, tag="azure", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "azure"
    apis: ClassVar[frozenset[str]] = frozenset({"chat", "responses"})

    base_url: str  # required here: a resource has no default
    api_version: str

    def problems(self) -> Iterator[Problem]:
        if not self.base_url:
            yield ("base_url",), f"required for kind '{self.kind}'"
        if not self.api_version.strip():
            yield ("api_version",), f"required for kind '{self.kind}'"
        yield from super().problems()
