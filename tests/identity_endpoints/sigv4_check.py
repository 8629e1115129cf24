"""Checks a received request's SigV4 signature against a secret, written from AWS's
specification (independently of gateway/providers/bedrock/sigv4.py): the canonical request
from the raw path and query as received, the signed headers' values, the body's SHA-256."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import parse_qsl
from urllib.parse import quote


class Signed:
    """What an `Authorization: AWS4-HMAC-SHA256 ...` header says."""

    def __init__(self, header: str) -> None:
        algorithm, _, rest = header.partition(" ")
        if algorithm != "AWS4-HMAC-SHA256":
            raise ValueError(f"not SigV4: {algorithm}")
        fields = dict(part.strip().split("=", 1) for part in rest.split(","))
        self.access_key, self.day, self.region, self.service, _ = fields["Credential"].split("/")
        self.signed_headers = fields["SignedHeaders"].split(";")
        self.signature = fields["Signature"]


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def expected_signature(
    method: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    secret_key: str,
    signed: Signed,
    double_encode: bool = True,
) -> str:
    lower = {k.lower(): v for k, v in headers.items()}
    path, _, query = raw_path.partition("?")
    uri = quote(path or "/", safe="/~") if double_encode else path or "/"
    pairs = sorted(
        (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
        for k, v in parse_qsl(query, keep_blank_values=True)
    )
    canonical = "\n".join(
        [
            method,
            uri,
            "&".join(f"{k}={v}" for k, v in pairs),
            "".join(f"{n}:{' '.join(lower[n].split())}\n" for n in signed.signed_headers),
            ";".join(signed.signed_headers),
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{signed.day}/{signed.region}/{signed.service}/aws4_request"
    to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            lower["x-amz-date"],
            scope,
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    key = _hmac(("AWS4" + secret_key).encode(), signed.day)
    for part in (signed.region, signed.service, "aws4_request"):
        key = _hmac(key, part)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()


def verify(
    method: str,
    raw_path: str,
    headers: Mapping[str, str],
    body: bytes,
    secrets: Mapping[str, tuple[str, str | None]],
    double_encode: bool = True,
) -> str:
    """The access key id that signed the request, when its signature and its session token
    (`secrets`: access key id -> (secret, session token)) check out; raises ValueError."""
    lower = {k.lower(): v for k, v in headers.items()}
    signed = Signed(lower.get("authorization", ""))
    if signed.access_key not in secrets:
        raise ValueError(f"unknown access key {signed.access_key}")
    secret, token = secrets[signed.access_key]
    if token is not None and lower.get("x-amz-security-token") != token:
        raise ValueError("x-amz-security-token is not the session token issued")
    if token is not None and "x-amz-security-token" not in signed.signed_headers:
        raise ValueError("x-amz-security-token is not signed")
    want = expected_signature(method, raw_path, headers, body, secret, signed, double_encode)
    if not hmac.compare_digest(want, signed.signature):
        raise ValueError("signature does not match")
    return signed.access_key
