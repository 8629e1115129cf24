"""How a Bedrock request is authenticated, for chat, embeddings and count_tokens alike: a
Bedrock API key as a bearer token, the key's AWS access key pair (and session token), or,
for an `identity: default` key, the AWS credentials fetched for it (`AwsIdentity`, handed
in as the call's `credential`), signing it with SigV4 for the provider's region.
Sans-IO: the signing time and the fetched credential are passed in."""

from __future__ import annotations

from datetime import datetime

from gateway.config_base import ProviderKey
from gateway.errors import UpstreamConnectError
from gateway.providers.base import AwsCredentials
from gateway.providers.base import Credential
from gateway.providers.base import TokenSource
from gateway.providers.bedrock.config import BedrockKey
from gateway.providers.bedrock.config import BedrockProvider
from gateway.providers.bedrock.sigv4 import sign
from gateway.providers.identity import AwsIdentity
from gateway.providers.identity import configured_proxy


def identity_source(provider: BedrockProvider, key: ProviderKey | None) -> TokenSource | None:
    """The credentials an `identity: default` key needs fetched (None for a key that holds
    its own secret)."""
    if not isinstance(key, BedrockKey) or key.cloud_identity is None:
        return None
    return AwsIdentity(
        sts_region=provider.region,
        profile_name=key.profile,
        assume_role=key.role_arn,
        assume_external_id=key.external_id.reveal() if key.external_id else None,
        session_name=key.role_session_name,
        proxy=configured_proxy(provider),
    )


def authorized(
    url: str,
    headers: dict[str, str],
    body: bytes,
    key: ProviderKey | None,
    region: str,
    now: datetime,
    credential: Credential | None = None,
) -> dict[str, str]:
    """`headers` with the key's credential added (a new dict when signed)."""
    if key is None:
        return headers
    if isinstance(key, BedrockKey) and key.cloud_identity is not None:
        if not isinstance(credential, AwsCredentials):
            raise UpstreamConnectError("no AWS credentials were fetched for the identity key")
        return sign(
            "POST",
            url,
            headers,
            body,
            access_key=credential.access_key_id,
            secret_key=credential.secret_access_key,
            session_token=credential.session_token,
            region=region,
            now=now,
        )
    if key.key:
        headers["authorization"] = "Bearer " + key.key.reveal()
    elif isinstance(key, BedrockKey) and key.aws_access_key_id and key.aws_secret_access_key:
        token = key.aws_session_token.reveal() if key.aws_session_token else None
        headers = sign(
            "POST",
            url,
            headers,
            body,
            access_key=key.aws_access_key_id.reveal(),
            secret_key=key.aws_secret_access_key.reveal(),
            session_token=token,
            region=region,
            now=now,
        )
    return headers
