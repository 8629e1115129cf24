"""Cloud identities as provider keys: `{identity: default}` instead of a secret (sans-IO).

A key with `identity: default` holds no secret: the gateway takes the identity of the place
it runs (a Kubernetes ServiceAccount federated with the cloud, an instance or managed
identity, environment credentials, a profile) and gets short-lived credentials from it.
This module holds what every kind with identities shares:

- the token sources the adapters declare (`AwsIdentity`, `GoogleIdentity`,
  `EntraIdentity`): frozen, hashable descriptions, one cache entry each in
  upstream/credentials.py, whose fetchers (upstream/aws_identity.py, google_auth.py,
  azure_identity.py) call the clouds' own libraries;
- the config rules of an identity key (`identity_problems`).

A source carries the provider's `proxy` setting, so token requests leave the way the
provider's own requests do. A source's repr shows no external id and no proxy (a proxy URL
may hold a password); its `label()` is what an error message says of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from collections.abc import Mapping
from urllib.parse import urlsplit

from gateway.config_base import ProviderBase
from gateway.config_parse import Path
from gateway.config_parse import Problem
from gateway.providers.base import TokenSource

DEFAULT_IDENTITY = "default"  # the only identity today: the environment's own
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
COGNITIVE_SERVICES = "https://cognitiveservices.azure.com/.default"
ROLE_SESSION_NAME = "llm-gateway"  # what CloudTrail shows for an assumed role's calls
_SESSION_NAME_CHARS = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+=,.@-_"
)


class AwsIdentity(TokenSource, frozen=True, kw_only=True):
    """AWS credentials from botocore's default chain (environment, profile, web identity,
    container credentials, instance metadata), optionally exchanged for a role's with
    AssumeRole."""

    # (named apart from the key's config fields: only providers/ reads those)
    sts_region: str  # the provider's region: STS is called there
    profile_name: str | None = None
    assume_role: str | None = None  # a role ARN
    assume_external_id: str | None = None
    session_name: str | None = None
    proxy: str | None = None  # the provider's `proxy` setting (None: the environment's)

    def label(self) -> str:
        text = "the AWS default credential chain"
        if self.profile_name:
            text += f" (profile {self.profile_name})"
        if self.assume_role:
            text += f" assuming {self.assume_role}"
        return text

    def __repr__(self) -> str:
        return f"AwsIdentity({self.label()!r})"


class GoogleIdentity(TokenSource, frozen=True, kw_only=True):
    """An OAuth token from Google Application Default Credentials (an ADC file, external
    account / workload identity federation, the metadata server of GCE and GKE Workload
    Identity), optionally impersonating a service account."""

    target_principal: str | None = None  # the service account impersonated (its email)
    # the IAM Credentials API's base URL when not Google's own (a Private Service Connect
    # endpoint); only with target_principal
    iam_base_url: str | None = None
    scopes: tuple[str, ...] = (CLOUD_PLATFORM,)
    proxy: str | None = None

    def label(self) -> str:
        text = "Google Application Default Credentials"
        if self.target_principal:
            text += f" impersonating {self.target_principal}"
        return text

    def __repr__(self) -> str:
        return f"GoogleIdentity({self.label()!r})"


class EntraIdentity(TokenSource, frozen=True, kw_only=True):
    """A Microsoft Entra ID token for `scope` from, in order: environment credentials,
    workload identity (AKS), managed identity, the Azure CLI's login."""

    scope: str = COGNITIVE_SERVICES
    proxy: str | None = None
    ca_file: str | None = None  # the provider's tls.ca_file: trusted for the authority too

    def label(self) -> str:
        return "the Microsoft Entra ID identity (environment, workload or managed identity)"

    def __repr__(self) -> str:
        return "EntraIdentity()"


def configured_proxy(provider: ProviderBase) -> str | None:
    """The provider's `proxy` setting as gateway/upstream/egress.py takes it (None: the
    environment decides; `none`: direct)."""
    return provider.proxy


def identity_problems(
    identity: str | None, here: Path, *, secrets: list[str], options: Mapping[str, object]
) -> Iterator[Problem]:
    """An identity key's rules: `identity` is `default`; it is not combined with the
    secret fields (`secrets`: the names of those set); the identity-only `options` (name ->
    value) are set only with it."""
    if identity is None:
        for name, value in options.items():
            if value is not None:
                yield (*here, name), "only with identity: default"
        return
    if identity != DEFAULT_IDENTITY:
        yield (*here, "identity"), f"must be '{DEFAULT_IDENTITY}'"
    if secrets:
        yield here, f"set either identity or {' and '.join(secrets)}, not both"


def aws_identity_problems(
    here: Path,
    role_arn: str | None,
    external_id_set: bool,
    role_session_name: str | None,
    profile: str | None,
) -> Iterator[Problem]:
    """The AWS options of an identity key."""
    if profile is not None and not profile.strip():
        yield (*here, "profile"), "must not be empty"
    if role_arn is not None and not (role_arn.startswith("arn:") and ":role/" in role_arn):
        yield (*here, "role_arn"), "must be an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)"
    if role_arn is None:
        if external_id_set:
            yield (*here, "external_id"), "only with role_arn"
        if role_session_name is not None:
            yield (*here, "role_session_name"), "only with role_arn"
    if role_session_name is not None and not (
        2 <= len(role_session_name) <= 64 and set(role_session_name) <= _SESSION_NAME_CHARS
    ):
        yield (
            (*here, "role_session_name"),
            "must be 2 to 64 letters, digits or +=,.@-_",
        )


def impersonate_problems(
    here: Path, impersonate: str | None, iam_endpoint: str | None
) -> Iterator[Problem]:
    """The Google options of an identity key: `impersonate`, and `iam_endpoint` with it."""
    if impersonate is not None and (
        "@" not in impersonate or impersonate != impersonate.strip() or "/" in impersonate
    ):
        yield (*here, "impersonate"), "must be a service account's email"
    if iam_endpoint is None:
        return
    if impersonate is None:
        yield (*here, "iam_endpoint"), "only with impersonate"
    parts = urlsplit(iam_endpoint)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        yield (
            (*here, "iam_endpoint"),
            "must be an http(s) base URL such as https://iamcredentials.googleapis.com",
        )
