"""The `bedrock` provider's config: an AWS region, and keys that are a Bedrock API key (a
bearer token), an access key pair for SigV4 (with an optional session token), or
`identity: default` (the AWS default credential chain, optionally a profile and a role to
assume; providers/identity.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import msgspec

from gateway.config_base import ProviderBase
from gateway.config_base import ProviderKey
from gateway.config_base import Secret
from gateway.config_parse import Path
from gateway.config_parse import Problem
from gateway.providers.identity import aws_identity_problems
from gateway.providers.identity import identity_problems


class BedrockKey(ProviderKey, forbid_unknown_fields=True, kw_only=True, frozen=True):
    aws_access_key_id: Secret | None = None
    aws_secret_access_key: Secret | None = None
    aws_session_token: Secret | None = None
    # `identity: default`: credentials from the AWS default chain instead of a secret
    cloud_identity: str | None = msgspec.field(default=None, name="identity")
    profile: str | None = None
    role_arn: str | None = None
    external_id: Secret | None = None  # AssumeRole's ExternalId: kept out of logs
    role_session_name: str | None = None

    def secrets(self) -> list[Secret]:
        held = (
            self.aws_access_key_id,
            self.aws_secret_access_key,
            self.aws_session_token,
            self.external_id,
        )
        return [*super().secrets(), *(s for s in held if s)]

    def identity(self) -> str:
        if self.cloud_identity is not None:
            return "|".join(
                ["identity", self.cloud_identity, self.profile or "", self.role_arn or ""]
            )
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
        secrets = [
            name
            for name in ("key", "aws_access_key_id", "aws_secret_access_key", "aws_session_token")
            if getattr(key, name)
        ]
        options = {
            "profile": key.profile,
            "role_arn": key.role_arn,
            "external_id": key.external_id,
            "role_session_name": key.role_session_name,
        }
        yield from identity_problems(key.cloud_identity, here, secrets=secrets, options=options)
        if key.cloud_identity is not None:
            yield from aws_identity_problems(
                here, key.role_arn, key.external_id is not None, key.role_session_name, key.profile
            )
            return
        if any(value is not None for value in options.values()):
            return  # reported above: those need identity
        if key.key and (has_id or has_secret):
            yield here, "set either key or aws_access_key_id and aws_secret_access_key, not both"
        elif has_id and not has_secret:
            yield (*here, "aws_secret_access_key"), "required with aws_access_key_id"
        elif has_secret and not has_id:
            yield (*here, "aws_access_key_id"), "required with aws_secret_access_key"
        elif not key.key and not has_id:
            yield here, "needs key, or aws_access_key_id and aws_secret_access_key"
