"""The credential cache's rules for cloud identities, on a fake clock and counting fetchers
(the real fetchers against loopback cloud endpoints are in the other test_identity_*
files): typed credentials, a failed refresh retried with backoff instead of on every
request, the last credential served while it lasts, scrubbed messages, and what key health
makes of a key whose identity gives nothing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from gateway.errors import UpstreamConnectError
from gateway.providers.base import AwsCredentials
from gateway.providers.base import BearerToken
from gateway.providers.base import Credential
from gateway.providers.identity import AwsIdentity
from gateway.providers.identity import GoogleIdentity
from gateway.routing.health import ADMITTED
from gateway.routing.health import CIRCUIT_OPEN
from gateway.routing.health import REFUSED
from gateway.routing.health import HealthPolicy
from gateway.routing.health import KeyHealth
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.credentials import CredentialsUnavailable
from gateway.upstream.credentials import scrubbed
from gateway.upstream.outcome import error_kind

AWS = AwsIdentity(sts_region="us-east-1", assume_role="arn:aws:iam::123456789012:role/llm")
SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


class Flaky:
    """A fetcher that fails while `down` is set, else hands out numbered credentials."""

    def __init__(self, life_s: float = 100.0) -> None:
        self.calls = 0
        self.down = False
        self.life_s = life_s
        self.now = 0.0
        self.threads: set[int] = set()

    def __call__(self, source: AwsIdentity) -> Credential:
        self.calls += 1
        self.threads.add(threading.get_ident())
        if self.down:
            raise ConnectionError(f"sts down, token {SECRET}")
        return AwsCredentials(
            access_key_id=f"ASIA{self.calls}",
            secret_access_key=SECRET,
            session_token=f"session-{self.calls}",
            expires_at=self.now + self.life_s,
        )


def cache(fetch: Flaky) -> AccessTokens:
    return AccessTokens(
        {AwsIdentity: fetch},
        clock=lambda: fetch.now,
        margin_s=20.0,
        retry_first_s=1.0,
        retry_max_s=8.0,
        skew_s=2.0,
    )


async def test_aws_credentials_are_typed_and_their_repr_hides_them() -> None:
    fetch = Flaky()
    got = await cache(fetch).credential(AWS)
    assert isinstance(got, AwsCredentials)
    assert got.session_token == "session-1"
    assert SECRET not in repr(got)
    assert "session-1" not in repr(got)
    assert "role/llm" in AWS.label()
    assert threading.get_ident() not in fetch.threads


async def test_one_fetch_per_window_under_concurrent_load() -> None:
    fetch = Flaky(life_s=100.0)
    tokens = cache(fetch)
    for step in range(50):
        fetch.now = step * 10.0  # 500 s: five lives of 100 s, refreshed 20 s before each end
        got = await asyncio.gather(*(tokens.credential(AWS) for _ in range(20)))
        assert len({c.access_key_id for c in got}) == 1
    assert fetch.calls == 7  # at 0, 80, 160, ... 480: one per window, not one per request


async def test_a_failed_refresh_serves_the_last_credential_and_backs_off() -> None:
    fetch = Flaky(life_s=100.0)
    tokens = cache(fetch)
    await tokens.credential(AWS)
    fetch.down, fetch.now = True, 85.0  # inside the margin: a refresh is due
    for _ in range(30):
        assert (await tokens.credential(AWS)).access_key_id == "ASIA1"
    assert fetch.calls == 2  # one failed refresh, then the backoff holds the rest
    fetch.now = 86.5  # past the first backoff (1 s)
    await tokens.credential(AWS)
    assert fetch.calls == 3
    fetch.now = 97.0  # 3 s left (the skew is 2 s): still served
    assert (await tokens.credential(AWS)).access_key_id == "ASIA1"
    fetch.now = 98.5  # past the skew: nothing left to serve
    with pytest.raises(CredentialsUnavailable) as caught:
        await tokens.credential(AWS)
    message = caught.value.message
    assert "the AWS default credential chain assuming arn:aws:iam::123456789012:role/llm" in message
    assert "ConnectionError: sts down" in message
    assert SECRET not in message
    fetch.down = False
    fetch.now = 200.0
    assert (await tokens.credential(AWS)).access_key_id.startswith("ASIA")


async def test_with_no_credential_every_request_is_refused_without_a_fetch() -> None:
    fetch = Flaky()
    fetch.down = True
    tokens = cache(fetch)
    for _ in range(10):
        with pytest.raises(CredentialsUnavailable):
            await tokens.credential(AWS)
    assert fetch.calls == 1
    waits = []
    for _ in range(6):  # the waits double up to retry_max_s
        fetch.now += 100.0
        with pytest.raises(CredentialsUnavailable) as caught:
            await tokens.credential(AWS)
        waits.append(caught.value.message.rsplit("next try in ", 1)[1])
    assert waits == ["2.0s)", "4.0s)", "8.0s)", "8.0s)", "8.0s)", "8.0s)"]


async def test_a_token_handed_back_near_its_expiry_is_not_fetched_on_every_request() -> None:
    """A library that returns its cached token close to expiry (inside the margin) must not
    make every request fetch: the next refresh is half its remaining life away."""
    now = [0.0]
    calls = []

    def near_expiry(source: GoogleIdentity) -> Credential:
        calls.append(now[0])
        return BearerToken(token="t", expires_at=now[0] + 10.0)  # margin is 20

    tokens = AccessTokens({GoogleIdentity: near_expiry}, clock=lambda: now[0], margin_s=20.0)
    for _ in range(100):
        await tokens.credential(GoogleIdentity())
    assert calls == [0.0]
    now[0] = 5.5
    await tokens.credential(GoogleIdentity())
    assert calls == [0.0, 5.5]


def test_scrubbed_cuts_tokens_and_keeps_ids() -> None:
    jwt = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlc2lnbmF0dXJl"
    text = f"AccessDenied for arn:aws:iam::123456789012:role/llm with {jwt} and {SECRET}"
    out = scrubbed(text)
    assert jwt not in out
    assert SECRET not in out
    assert "arn:aws:iam::123456789012:role/llm" in out
    assert scrubbed("tenant 72f988bf-86f1-41af-91ab-2d7cd011db47") == (
        "tenant 72f988bf-86f1-41af-91ab-2d7cd011db47"
    )


def test_a_key_without_a_credential_has_its_circuit_opened_at_once() -> None:
    err = CredentialsUnavailable("cannot get a credential from x")
    assert isinstance(err, UpstreamConnectError)
    assert err.retryable
    assert error_kind(err) == "credentials"
    changes = []
    health = KeyHealth("bedrock", "k", HealthPolicy(circuit_failures=5, circuit_open_s=5.0))
    health.on_change = lambda h, reason, until, model, first: changes.append((reason, until))
    ticket = health.begin(100.0, "m")
    assert ticket == ADMITTED
    health.unusable(ticket, 100.0)
    assert changes == [(CIRCUIT_OPEN, 105.0)]
    assert health.begin(101.0, "m") == REFUSED
    probe = health.begin(105.0, "m")
    health.unusable(probe, 105.0)
    assert changes[-1] == (CIRCUIT_OPEN, 115.0)  # the backoff doubles per failed probe
