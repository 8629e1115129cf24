"""AWS Signature Version 4 for one HTTP request, sans-IO: the time is passed in.

`sign` returns the request's headers plus `x-amz-date`, `x-amz-security-token` (with a
session token) and `authorization`. What is signed:

- the canonical URI: the path exactly as sent, each segment URI-encoded once more (AWS
  encodes the path twice for every service but S3: a Bedrock model id `a:b` is sent as
  `a%3Ab` and signed as `a%253Ab`);
- the canonical query string: name=value pairs, each URI-encoded, sorted;
- every header given (names lowercased, values trimmed, inner whitespace collapsed) except
  `user-agent`, `expect`, `transfer-encoding` and `x-amzn-trace-id`, which proxies and
  clients change, plus `host` (the URL's host, with its port unless it is the scheme's
  default), `x-amz-date` and `x-amz-security-token`;
- the SHA-256 of the body.

No `x-amz-content-sha256` header is added: only S3 wants it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from datetime import UTC
from datetime import datetime
from urllib.parse import parse_qsl
from urllib.parse import quote
from urllib.parse import urlsplit

ALGORITHM = "AWS4-HMAC-SHA256"
UNSIGNED_HEADERS = frozenset({"user-agent", "expect", "transfer-encoding", "x-amzn-trace-id"})
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _hmac(key: bytes, msg: str) -> bytes:
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()


def _canonical_host(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal keeps its brackets
        host = f"[{host}]"
    if parts.port is not None and parts.port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{parts.port}"
    return host


def canonical_uri(path: str) -> str:
    """The path as sent, each segment encoded again (`%` becomes `%25`, `~` stays)."""
    return quote(path or "/", safe="/~")


def canonical_query(query: str) -> str:
    pairs = [
        (quote(k, safe="-_.~"), quote(v, safe="-_.~"))
        for k, v in parse_qsl(query, keep_blank_values=True)
    ]
    return "&".join(f"{k}={v}" for k, v in sorted(pairs))


def sign(
    method: str,
    url: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    access_key: str,
    secret_key: str,
    session_token: str | None,
    region: str,
    service: str = "bedrock",
    now: datetime,
) -> dict[str, str]:
    """`headers` plus the SigV4 headers for this request at time `now`."""
    stamp = now.astimezone(UTC)
    amz_date = stamp.strftime("%Y%m%dT%H%M%SZ")
    day = stamp.strftime("%Y%m%d")
    out = dict(headers)
    out["x-amz-date"] = amz_date
    if session_token:
        out["x-amz-security-token"] = session_token
    signed: dict[str, str] = {}
    for name, value in out.items():
        lname = name.lower()
        if lname in UNSIGNED_HEADERS or lname == "authorization":
            continue
        signed[lname] = " ".join(value.split())
    signed.setdefault("host", _canonical_host(url))
    names = sorted(signed)
    signed_headers = ";".join(names)
    parts = urlsplit(url)
    canonical = "\n".join(
        [
            method.upper(),
            canonical_uri(parts.path),
            canonical_query(parts.query),
            "".join(f"{n}:{signed[n]}\n" for n in names),
            signed_headers,
            hashlib.sha256(body).hexdigest(),
        ]
    )
    scope = f"{day}/{region}/{service}/aws4_request"
    to_sign = "\n".join(
        [ALGORITHM, amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()]
    )
    key = _hmac(("AWS4" + secret_key).encode(), day)
    for part in (region, service, "aws4_request"):
        key = _hmac(key, part)
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    out["authorization"] = (
        f"{ALGORITHM} Credential={access_key}/{scope}, "
        f"SignedHeaders={signed_headers}, Signature={signature}"
    )
    return out
