"""The `vertex` provider's config: a Google Cloud project and region, and keys that are
service-account credentials files or `identity: default` (Application Default Credentials,
optionally impersonating a service account; providers/identity.py); an OAuth token is
fetched from each."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar
from urllib.parse import quote

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.config_base import effective_base_url
from gateway.config_parse import Path
from gateway.config_parse import Problem
from gateway.providers.identity import identity_problems
from gateway.providers.identity import impersonate_problems


class VertexKey(ProviderKey, forbid_unknown_fields=True, kw_only=True, frozen=True):
    credentials_file: str | None = None  # a service account JSON file
    # `identity: default`: Application Default Credentials instead of a file
    cloud_identity: str | None = msgspec.field(default=None, name="identity")
    impersonate: str | None = None  # a service account's email
    iam_endpoint: str | None = None  # the IAM Credentials API's base URL (with impersonate)

    def identity(self) -> str:
        if self.cloud_identity is not None:
            text = f"identity|{self.cloud_identity}|{self.impersonate or ''}"
            return text + (f"|{self.iam_endpoint}" if self.iam_endpoint else "")
        return self.credentials_file or ""


class VertexProvider(
    ProviderBase, tag="vertex", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "vertex"

    keys: list[VertexKey] = msgspec.field(default_factory=list)  # type: ignore[assignment]
    region: str
    project: str

    def default_base_url(self) -> str:
        if self.region == "global":
            return "https://aiplatform.googleapis.com"  # the global endpoint has no region prefix
        return f"https://{self.region}-aiplatform.googleapis.com"

    def models_url(self) -> str:
        """The prefix of every publisher model's operations (`{models_url}{model}:predict`)."""
        project, region = quote(self.project, safe=""), quote(self.region, safe="")
        return (
            f"{effective_base_url(self)}/v1/projects/{project}/locations/{region}"
            "/publishers/google/models/"
        )

    def problems(self) -> Iterator[Problem]:
        for field in ("region", "project"):
            if not getattr(self, field):
                yield (field,), f"required for kind '{self.kind}'"
        yield from super().problems()

    def key_problems(self, key: ProviderKey, here: Path) -> Iterator[Problem]:
        assert isinstance(key, VertexKey)
        if key.key is not None:
            yield (*here, "key"), "not used by kind vertex (use credentials_file)"
        secrets = ["credentials_file"] if key.credentials_file else []
        options = {"impersonate": key.impersonate, "iam_endpoint": key.iam_endpoint}
        yield from identity_problems(key.cloud_identity, here, secrets=secrets, options=options)
        if key.cloud_identity is not None:
            yield from impersonate_problems(here, key.impersonate, key.iam_endpoint)
        elif not key.credentials_file:
            yield (*here, "credentials_file"), f"required for kind '{self.kind}'"
