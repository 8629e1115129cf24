"""The `gemini` provider's config: a Gemini API key (`x-goog-api-key`), or `identity:
default` (an OAuth token from Application Default Credentials, optionally impersonating a
service account; providers/identity.py), which the Gemini API takes as a bearer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.config_base import effective_base_url
from gateway.config_parse import Path
from gateway.config_parse import Problem
from gateway.providers.identity import identity_problems
from gateway.providers.identity import impersonate_problems


class GeminiKey(ProviderKey, forbid_unknown_fields=True, kw_only=True, frozen=True):
    # `identity: default`: Application Default Credentials instead of an API key
    cloud_identity: str | None = msgspec.field(default=None, name="identity")
    impersonate: str | None = None  # a service account's email
    iam_endpoint: str | None = None  # the IAM Credentials API's base URL (with impersonate)

    def identity(self) -> str:
        if self.cloud_identity is not None:
            text = f"identity|{self.cloud_identity}|{self.impersonate or ''}"
            return text + (f"|{self.iam_endpoint}" if self.iam_endpoint else "")
        return super().identity()


class GeminiProvider(
    ProviderBase, tag="gemini", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "gemini"
    default_url: ClassVar[str | None] = "https://generativelanguage.googleapis.com"
    env_key: ClassVar[str | None] = "GEMINI_API_KEY"

    keys: list[GeminiKey] = msgspec.field(default_factory=list)  # type: ignore[assignment]

    def models_url(self) -> str:
        """The prefix of every model's operations (`{models_url}{model}:generateContent`)."""
        return effective_base_url(self) + "/v1beta/models/"

    def key_problems(self, key: ProviderKey, here: Path) -> Iterator[Problem]:
        if not isinstance(key, GeminiKey):  # the built-in default's key from the environment
            yield from super().key_problems(key, here)
            return
        options = {"impersonate": key.impersonate, "iam_endpoint": key.iam_endpoint}
        secrets = ["key"] if key.key is not None else []
        yield from identity_problems(key.cloud_identity, here, secrets=secrets, options=options)
        if key.cloud_identity is not None:
            yield from impersonate_problems(here, key.impersonate, key.iam_endpoint)
        else:
            yield from super().key_problems(key, here)
