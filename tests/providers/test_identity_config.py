"""The config rules of `identity: default` keys, per kind: which fields go with an identity,
which secrets it excludes, and the shape of each identity option."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.config import parse_config

PROVIDERS = {
    "bedrock": "kind: bedrock, region: eu-west-1",
    "vertex": "kind: vertex, project: p, region: europe-west4",
    "gemini": "kind: gemini",
    "azure": "kind: azure, base_url: 'https://x.openai.azure.com', api_version: '2024-10-21'",
}


def problems_of(kind: str, key: str) -> list[str]:
    text = f"providers:\n  - {{name: p, {PROVIDERS[kind]}, keys: [{key}]}}\n"
    try:
        parse_config(text, env={})
    except ConfigError as error:
        return error.problems
    return []


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_an_identity_key_alone_is_valid(kind: str) -> None:
    assert problems_of(kind, "{identity: default}") == []


@pytest.mark.parametrize("kind", sorted(PROVIDERS))
def test_the_only_identity_is_default(kind: str) -> None:
    assert problems_of(kind, "{identity: workload}") == [
        "providers[0].keys[0].identity: must be 'default'"
    ]


@pytest.mark.parametrize(
    ("kind", "secret", "named"),
    [
        ("gemini", "key: k", "key"),
        ("azure", "key: k", "key"),
        ("vertex", "credentials_file: /sa.json", "credentials_file"),
        ("bedrock", "aws_access_key_id: AKIA, aws_secret_access_key: s", "aws_access_key_id"),
    ],
)
def test_an_identity_with_a_secret_is_refused(kind: str, secret: str, named: str) -> None:
    [problem] = problems_of(kind, f"{{identity: default, {secret}}}")
    assert problem.startswith("providers[0].keys[0]: set either identity or ")
    assert named in problem


@pytest.mark.parametrize(
    ("kind", "option"),
    [
        ("vertex", "impersonate: a@p.iam.gserviceaccount.com"),
        ("gemini", "impersonate: a@p.iam.gserviceaccount.com"),
        ("vertex", "iam_endpoint: 'https://iam.example'"),
        ("bedrock", "role_arn: 'arn:aws:iam::1:role/r'"),
        ("bedrock", "profile: prod"),
    ],
)
def test_identity_options_need_an_identity(kind: str, option: str) -> None:
    secret = {"vertex": "credentials_file: /sa.json", "gemini": "key: k"}.get(
        kind, "aws_access_key_id: AKIA, aws_secret_access_key: s"
    )
    name = option.split(":")[0]
    assert f"providers[0].keys[0].{name}: only with identity: default" in problems_of(
        kind, f"{{{secret}, {option}}}"
    )


@pytest.mark.parametrize("kind", ["vertex", "gemini"])
@pytest.mark.parametrize(
    "email", ["llm", "a@p.iam.gserviceaccount.com/x", "' a@p.iam.gserviceaccount.com'"]
)
def test_impersonate_is_an_email(kind: str, email: str) -> None:
    assert problems_of(kind, f"{{identity: default, impersonate: {email}}}") == [
        "providers[0].keys[0].impersonate: must be a service account's email"
    ]


@pytest.mark.parametrize("kind", ["vertex", "gemini"])
def test_iam_endpoint_goes_with_impersonate(kind: str) -> None:
    good = "{identity: default, impersonate: a@p.iam.gserviceaccount.com, iam_endpoint: "
    assert problems_of(kind, good + "'https://iamcredentials-psc.p.googleapis.com/'}") == []
    assert problems_of(kind, "{identity: default, iam_endpoint: 'https://iam.example'}") == [
        "providers[0].keys[0].iam_endpoint: only with impersonate"
    ]
    for bad in ("iam.example", "ftp://iam.example", "'https://iam.example/?a=1'", "'https://'"):
        assert problems_of(kind, good + bad + "}") == [
            "providers[0].keys[0].iam_endpoint: must be an http(s) base URL such as "
            "https://iamcredentials.googleapis.com"
        ], bad


@pytest.mark.parametrize(
    ("option", "problem"),
    [
        ("role_arn: 'arn:aws:iam::1:user/u'", "role_arn: must be an IAM role ARN"),
        ("external_id: x", "external_id: only with role_arn"),
        ("role_session_name: gw", "role_session_name: only with role_arn"),
        ("profile: ''", "profile: must not be empty"),
    ],
)
def test_bedrock_identity_options(option: str, problem: str) -> None:
    [found] = problems_of("bedrock", f"{{identity: default, {option}}}")
    assert found.startswith(f"providers[0].keys[0].{problem}")


def test_a_role_session_name_is_what_sts_accepts() -> None:
    role = "role_arn: 'arn:aws:iam::123456789012:role/r'"
    assert problems_of("bedrock", f"{{identity: default, {role}, role_session_name: gw-1}}") == []
    [problem] = problems_of("bedrock", f"{{identity: default, {role}, role_session_name: 'a b'}}")
    assert problem == (
        "providers[0].keys[0].role_session_name: must be 2 to 64 letters, digits or +=,.@-_"
    )
