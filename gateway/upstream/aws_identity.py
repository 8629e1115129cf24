"""AWS credentials for an `AwsIdentity` key, from botocore's default credential chain.

The chain is botocore's own (`botocore.session.Session().get_credentials()`), in its order:
environment variables, the shared credentials and config files (`profile`, with their
`role_arn`/`source_profile`, `credential_process` and SSO entries), web identity
(`AWS_WEB_IDENTITY_TOKEN_FILE` + `AWS_ROLE_ARN`: EKS IRSA), container credentials
(`AWS_CONTAINER_CREDENTIALS_FULL_URI`/`_RELATIVE_URI`: ECS tasks, EKS Pod Identity), then
the instance metadata service (IMDSv2). With `role_arn` the chain's credentials then call
STS AssumeRole (with `external_id`, `role_session_name`) and the role's are used.

Each fetch resolves the chain anew in a new botocore session: upstream/credentials.py
keeps the result and decides when to fetch again (its own refresh margin), so botocore's
own refresh-on-read is switched off for the credentials it returns (`_frozen`), which
would otherwise call the endpoint a second time when the credentials are close to expiry.

STS is called in the provider's region, through the provider's proxy (egress.proxy_for:
the `proxy` setting, else the environment, with no_proxy). The instance metadata and
container endpoints are node-local and are reached directly, as botocore does.
Blocking: call it on a worker thread.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from gateway.providers.base import AwsCredentials
from gateway.providers.identity import ROLE_SESSION_NAME
from gateway.providers.identity import AwsIdentity
from gateway.upstream.egress import proxy_for

STATIC_RECHECK_S = (
    3600.0  # credentials without an expiry (keys in the environment) are read again hourly
)
ASSUME_ROLE_SECONDS = 3600


# botocore logs STS answers (secret keys included) at DEBUG: held at WARNING whatever
# `logging.level` says
logging.getLogger("botocore").setLevel(logging.WARNING)


class NoAwsCredentials(Exception):
    """The chain found nothing: no identity is configured where the gateway runs."""


def _sts_url(region: str) -> str:
    return f"https://sts.{region}.amazonaws.com/"


def _session(source: AwsIdentity) -> Any:
    import botocore.session  # type: ignore[import-untyped]
    from botocore.config import Config  # type: ignore[import-untyped]

    session = botocore.session.Session(profile=source.profile_name)
    session.set_config_variable("region", source.sts_region)
    proxy = proxy_for(_sts_url(source.sts_region), source.proxy)
    # every client the session makes (the chain's own STS calls for web identity and
    # profile roles, and the AssumeRole below) takes this config
    session.set_default_client_config(
        Config(
            proxies={"http": proxy, "https": proxy} if proxy else {},
            connect_timeout=5,
            read_timeout=10,
            retries={"max_attempts": 2, "mode": "standard"},
        )
    )
    return session


def _frozen(credentials: Any) -> AwsCredentials:
    """The chain's credentials as they were just resolved, and their expiry."""
    from botocore.credentials import RefreshableCredentials  # type: ignore[import-untyped]

    if isinstance(credentials, RefreshableCredentials):
        # Read what was fetched instead of refreshing again inside botocore's 15-minute
        # advisory window (the margin is upstream/credentials.py's business).
        credentials._advisory_refresh_timeout = 0
        credentials._mandatory_refresh_timeout = 0
    frozen = credentials.get_frozen_credentials()
    expiry = getattr(credentials, "_expiry_time", None)
    expires_at = expiry.timestamp() if expiry is not None else time.time() + STATIC_RECHECK_S
    return AwsCredentials(
        access_key_id=frozen.access_key,
        secret_access_key=frozen.secret_key,
        session_token=frozen.token or None,
        expires_at=expires_at,
    )


def _assumed(session: Any, base: AwsCredentials, source: AwsIdentity) -> AwsCredentials:
    assert source.assume_role is not None
    sts = session.create_client(
        "sts",
        region_name=source.sts_region,
        aws_access_key_id=base.access_key_id,
        aws_secret_access_key=base.secret_access_key,
        aws_session_token=base.session_token,
    )
    options: dict[str, Any] = {
        "RoleArn": source.assume_role,
        "RoleSessionName": source.session_name or ROLE_SESSION_NAME,
        "DurationSeconds": ASSUME_ROLE_SECONDS,
    }
    if source.assume_external_id:
        options["ExternalId"] = source.assume_external_id
    answer = sts.assume_role(**options)["Credentials"]
    return AwsCredentials(
        access_key_id=answer["AccessKeyId"],
        secret_access_key=answer["SecretAccessKey"],
        session_token=answer.get("SessionToken"),
        expires_at=answer["Expiration"].timestamp(),
    )


def fetch_aws_credentials(source: AwsIdentity) -> AwsCredentials:
    """Fresh credentials for `source` (the chain's, or the assumed role's)."""
    session = _session(source)
    credentials = session.get_credentials()
    if credentials is None:
        raise NoAwsCredentials(
            "no AWS credentials found (environment, shared files, web identity, container "
            "credentials, instance metadata)"
        )
    base = _frozen(credentials)
    if not source.assume_role:
        return base
    return _assumed(session, base, source)
