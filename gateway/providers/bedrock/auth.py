"""How a Bedrock request is authenticated, for chat and embeddings alike: a Bedrock API key
as a bearer token, or the key's AWS access key pair (and session token) signing it with
SigV4 for the provider's region. Sans-IO: the signing time is passed in."""

from __future__ import annotations

from datetime import datetime

from gateway.config_base import ProviderKey
from gateway.providers.bedrock.config import BedrockKey
from gateway.providers.bedrock.sigv4 import sign


def authorized(
    url: str,
    headers: dict[str, str],
    body: bytes,
    key: ProviderKey | None,
    region: str,
    now: datetime,
) -> dict[str, str]:
    """`headers` with the key's credential added (a new dict when signed)."""
    if key is None:
        return headers
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
