"""The `bedrock` provider's config: an AWS region, and keys that are either a Bedrock API
key (a bearer token) or an access key pair for SigV4 (with an optional session token)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.config_base import Secret
from gateway.config_parse import Path
from gateway.config_parse import Problem


class BedrockKey(ProviderKey, forbid_unknown_fields=True, kw_only=True, frozen=True):
    aws_access_key_id: Secret | None = None
    aws_secret_access_key: Secret | None = None
    aws_session_token: Secret | None = None

    def secrets(self) -> list[Secret]:
        pair = (self.aws_access_key_id, self.aws_secret_access_key, self.aws_session_token)
        return [*super().secrets(), *(s for s in pair if s)]

    def identity(self) -> str:
        secret = self.key or self.aws_access_key_id
        return secret.reveal() if secret else ""


class BedrockProvider(
    ProviderBase, tag="bedrock", forbid_unknown_fields=True, kw_only=True, frozen=True
):
    kind: ClassVar[str] = "bedrock"

    keys: list[BedrockKey] = msgspec.field(default_factory=list)  # type: ignore[assignment]
    region: str

    def default_base_url(self) -> str:
        return f"https://bedrock-runtime.{self.region}.amazonaws.com"

    def problems(self) -> Iterator[Problem]:
        if not self.region:
            yield ("region",), f"required for kind '{self.kind}'"
        yield from super().problems()

    def key_problems(self, key: ProviderKey, here: Path) -> Iterator[Problem]:
        # Empty values count as absent, so `${AWS_ACCESS_KEY_ID:-}` can choose the SigV4 pair.
        assert isinstance(key, BedrockKey)
        has_id, has_secret = bool(key.aws_access_key_id), bool(key.aws_secret_access_key)
        if key.key and (has_id or has_secret):
            yield here, "set either key or aws_access_key_id and aws_secret_access_key, not both"
        elif has_id and not has_secret:
            yield (*here, "aws_secret_access_key"), "required with aws_access_key_id"
        elif has_secret and not has_id:
            yield (*here, "aws_access_key_id"), "required with aws_secret_access_key"
        elif not key.key and not has_id:
            yield here, "needs key, or aws_access_key_id and aws_secret_access_key"
