"""The `azure` provider's config: the resource's `base_url` and `api_version` (a dated
version, `v1` or `preview`), and keys that are an api key (`api-key`) or `identity:
default` (a Microsoft Entra ID token, sent as a bearer; providers/identity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.config_parse import Path
from gateway.config_parse import Problem
from gateway.providers.identity import identity_problems


class AzureKey(ProviderKey, forbid_unknown_fields=True, kw_only=True, frozen=True):
    # `identity: default`: a Microsoft Entra ID token instead of an api key
    cloud_identity: str | None = msgspec.field(default=None, name="identity")

    def identity(self) -> str:
        if self.cloud_identity is not None:
            return f"identity|{self.cloud_identity}"
        return super().identity()


class AzureProvider(
    ProviderBase, tag="azure", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "azure"
    apis: ClassVar[frozenset[str]] = frozenset({"chat", "responses"})

    base_url: str  # required here: a resource has no default
    api_version: str
    keys: list[AzureKey] = msgspec.field(default_factory=list)  # type: ignore[assignment]

    def problems(self) -> Iterator[Problem]:
        if not self.base_url:
            yield ("base_url",), f"required for kind '{self.kind}'"
        if not self.api_version.strip():
            yield ("api_version",), f"required for kind '{self.kind}'"
        yield from super().problems()

    def key_problems(self, key: ProviderKey, here: Path) -> Iterator[Problem]:
        if not isinstance(key, AzureKey):  # the built-in default's key from the environment
            yield from super().key_problems(key, here)
            return
        secrets = ["key"] if key.key is not None else []
        yield from identity_problems(key.cloud_identity, here, secrets=secrets, options={})
        if key.cloud_identity is None:
            yield from super().key_problems(key, here)
