"""`AwsIdentity` credentials from botocore's real chain against loopback fakes of STS, the
container credentials endpoint and IMDSv2 (tests/identity_endpoints/aws.py), reached
through botocore's own endpoint settings; then the credentials the cache keeps under load,
with short expiries."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.providers.base import AwsCredentials
from gateway.providers.identity import AwsIdentity
from gateway.upstream.aws_identity import fetch_aws_credentials
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.credentials import CredentialsUnavailable
from tests.identity_endpoints.aws import BASE_KEY
from tests.identity_endpoints.aws import CONTAINER_TOKEN
from tests.identity_endpoints.aws import WEB_IDENTITY_TOKEN
from tests.identity_endpoints.aws import FakeAws
from tests.identity_endpoints.isolation import closed_port
from tests.identity_endpoints.isolation import isolate

ROLE_ARN = "arn:aws:iam::123456789012:role/llm-gateway"
TARGET_ROLE = "arn:aws:iam::210987654321:role/bedrock-invoke"


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    fake = FakeAws().start()
    yield fake
    fake.stop()


def web_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: FakeAws) -> None:
    """What the EKS pod identity webhook sets for IRSA, with STS at the fake."""
    isolate(monkeypatch, tmp_path)
    token = tmp_path / "token"
    token.write_text(WEB_IDENTITY_TOKEN)
    monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token))
    monkeypatch.setenv("AWS_ROLE_ARN", ROLE_ARN)
    monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "irsa")
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", aws.base_url)


def test_web_identity(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: FakeAws) -> None:
    web_identity(monkeypatch, tmp_path, aws)
    got = fetch_aws_credentials(AwsIdentity(sts_region="us-east-1"))
    assert aws.count("AssumeRoleWithWebIdentity") == 1
    form = aws.forms[-1]
    assert (form["RoleArn"], form["WebIdentityToken"]) == (ROLE_ARN, WEB_IDENTITY_TOKEN)
    assert aws.issued[got.access_key_id] == (got.secret_access_key, got.session_token)
    assert got.expires_at == pytest.approx(time.time() + 3600, abs=5)


def test_assume_role_on_top_of_web_identity(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: FakeAws
) -> None:
    web_identity(monkeypatch, tmp_path, aws)
    source = AwsIdentity(
        sts_region="eu-west-1",
        assume_role=TARGET_ROLE,
        assume_external_id="ext-42",
        session_name="gw-test",
    )
    got = fetch_aws_credentials(source)
    assert (aws.count("AssumeRoleWithWebIdentity"), aws.count("AssumeRole")) == (1, 1)
    form = aws.forms[-1]  # AssumeRole, signed (the fake checked it) by the web identity's keys
    assert form["RoleArn"] == TARGET_ROLE
    assert (form["ExternalId"], form["RoleSessionName"]) == ("ext-42", "gw-test")
    assert got.access_key_id == "ASIAFAKE00000000002"  # the role's, not the chain's


def test_profile_then_assume_role(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: FakeAws
) -> None:
    env = isolate(monkeypatch, tmp_path)
    Path(env["AWS_SHARED_CREDENTIALS_FILE"]).write_text(
        f"[prod]\naws_access_key_id = {BASE_KEY[0]}\naws_secret_access_key = {BASE_KEY[1]}\n"
    )
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", aws.base_url)
    got = fetch_aws_credentials(
        AwsIdentity(sts_region="us-east-1", profile_name="prod", assume_role=TARGET_ROLE)
    )
    assert aws.count("AssumeRole") == 1
    assert aws.forms[-1]["RoleSessionName"] == "llm-gateway"  # the default session name
    assert got.session_token == aws.issued[got.access_key_id][1]


def test_container_credentials(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: FakeAws
) -> None:
    """ECS tasks and EKS Pod Identity: a full URI (loopback is allowed) and a token file."""
    isolate(monkeypatch, tmp_path)
    token = tmp_path / "pod-identity-token"
    token.write_text(CONTAINER_TOKEN)
    monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", aws.base_url + "/ecs/creds")
    monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", str(token))
    got = fetch_aws_credentials(AwsIdentity(sts_region="us-east-1"))
    assert aws.count("container") == 1
    assert aws.issued[got.access_key_id][1] == got.session_token


def test_imds_v2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: FakeAws) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
    monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", aws.base_url + "/")
    got = fetch_aws_credentials(AwsIdentity(sts_region="us-east-1"))
    assert (aws.count("imds-token"), aws.count("imds")) == (1, 1)
    assert aws.issued[got.access_key_id][1] == got.session_token


def test_environment_keys_have_no_expiry(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    isolate(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", BASE_KEY[0])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", BASE_KEY[1])
    got = fetch_aws_credentials(AwsIdentity(sts_region="us-east-1"))
    assert (got.access_key_id, got.session_token) == (BASE_KEY[0], None)
    assert got.expires_at == pytest.approx(time.time() + 3600, abs=5)  # read again hourly


async def test_nothing_configured_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    isolate(monkeypatch, tmp_path)
    with pytest.raises(CredentialsUnavailable, match="no AWS credentials found"):
        await AccessTokens().credential(AwsIdentity(sts_region="us-east-1"))


async def test_sts_down_names_the_identity_and_no_token(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, aws: FakeAws
) -> None:
    web_identity(monkeypatch, tmp_path, aws)
    monkeypatch.setenv("AWS_ENDPOINT_URL_STS", f"http://127.0.0.1:{closed_port()}")
    source = AwsIdentity(sts_region="us-east-1", assume_role=TARGET_ROLE)
    with pytest.raises(CredentialsUnavailable) as caught:
        await AccessTokens().credential(source)
    message = caught.value.message
    assert f"the AWS default credential chain assuming {TARGET_ROLE}" in message
    assert WEB_IDENTITY_TOKEN not in message


async def test_refreshed_before_expiry_once_per_window_under_load(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    aws: FakeAws,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Credentials living 3 s, refreshed 1.5 s before they end: 40 concurrent requests
    every 50 ms for 3.6 s get valid credentials throughout, from about one STS exchange per
    window, fetched on worker threads (never the event loop's), and nothing of them is
    logged even at DEBUG."""
    web_identity(monkeypatch, tmp_path, aws)
    aws.life_s = 3.0
    threads: set[int] = set()

    def fetch(source: AwsIdentity) -> AwsCredentials:
        threads.add(threading.get_ident())
        return fetch_aws_credentials(source)

    tokens = AccessTokens({AwsIdentity: fetch}, margin_s=1.5, skew_s=0.5)
    source = AwsIdentity(sts_region="us-east-1")
    caplog.set_level(logging.DEBUG)
    served: list[AwsCredentials] = []
    started = time.monotonic()
    while time.monotonic() - started < 3.6:
        got = await asyncio.gather(*(tokens.credential(source) for _ in range(40)))
        for c in got:
            assert isinstance(c, AwsCredentials)
            assert c.expires_at - time.time() > 0.5  # never one about to lapse
        served.extend(got)  # type: ignore[arg-type]
        await asyncio.sleep(0.05)
    fetches = aws.count("AssumeRoleWithWebIdentity")
    # windows of ~1.5 s (+ the fetch's own time) in 3.6 s: 2 to 4 fetches, for ~2,800 requests
    assert 2 <= fetches <= 4, fetches
    assert len({c.access_key_id for c in served}) == fetches
    assert threading.get_ident() not in threads
    logged = "\n".join(r.getMessage() for r in caplog.records)
    for c in served[:: len(served) // 10]:
        assert c.secret_access_key not in logged
        assert c.session_token is not None
        assert c.session_token not in logged
