"""SigV4 signing checked against botocore's SigV4Auth on the same requests (botocore is a
test oracle only; the gateway does not import it)."""

from __future__ import annotations

from datetime import UTC
from datetime import datetime

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials

from gateway.providers.bedrock.sigv4 import sign

BASE = "https://bedrock-runtime.us-east-1.amazonaws.com"
CASES = [
    ("POST", f"{BASE}/model/amazon.nova-micro-v1%3A0/converse-stream", None, "us-east-1"),
    ("POST", f"{BASE}/model/anthropic.claude-3-haiku/converse", "session-token-xyz", "us-east-1"),
    ("POST", "http://127.0.0.1:8123/model/us.amazon.nova-lite-v1%3A0/converse", None, "eu-west-3"),
    ("GET", f"{BASE}/foundation-models?b=2&a=x%20y&c=", "tok", "us-west-2"),
    (
        "POST",
        "https://bedrock-runtime.us-east-1.amazonaws.com:443/model/m~1/converse",
        None,
        "us-east-1",
    ),
]


@pytest.mark.parametrize(("method", "url", "token", "region"), CASES)
def test_matches_botocore(method: str, url: str, token: str | None, region: str) -> None:
    body = b'{"messages":[{"role":"user","content":[{"text":"hi"}]}]}' if method == "POST" else b""
    headers = {"content-type": "application/json", "accept": "application/json"}
    request = AWSRequest(method=method, url=url, headers=dict(headers), data=body)
    SigV4Auth(
        Credentials("AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG", token), "bedrock", region
    ).add_auth(request)
    now = datetime.strptime(request.headers["X-Amz-Date"], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    ours = sign(
        method,
        url,
        headers,
        body,
        access_key="AKIDEXAMPLE",
        secret_key="wJalrXUtnFEMI/K7MDENG",
        session_token=token,
        region=region,
        now=now,
    )
    assert ours["authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]
    if token:
        assert ours["x-amz-security-token"] == token
    else:
        assert "x-amz-security-token" not in ours
    assert ours["content-type"] == "application/json"


def test_fixed_time_and_shape() -> None:
    now = datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC)
    out = sign(
        "POST",
        f"{BASE}/model/x%3Ay/converse",
        {"User-Agent": "ignored"},
        b"{}",
        access_key="AK",
        secret_key="SK",
        session_token=None,
        region="us-east-1",
        now=now,
    )
    assert out["x-amz-date"] == "20240102T030405Z"
    auth = out["authorization"]
    assert auth.startswith(
        "AWS4-HMAC-SHA256 Credential=AK/20240102/us-east-1/bedrock/aws4_request, "
        "SignedHeaders=host;x-amz-date, Signature="
    )
    assert len(auth.rsplit("=", 1)[1]) == 64
