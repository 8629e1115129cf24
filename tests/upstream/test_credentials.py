"""Access tokens for declared token sources: fetched off the loop by the fetcher of the
source's type, cached, refreshed, shared; Google service accounts through google-auth."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.errors import UpstreamConnectError
from gateway.providers.base import BearerToken
from gateway.providers.base import GoogleServiceAccount
from gateway.providers.base import TokenSource
from gateway.upstream.credentials import REFRESH_MARGIN_S
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.google_auth import fetch_service_account_token
from tests.upstreams.gemini_upstream import FakeGemini
from tests.vertex_credentials import service_account_file

SA = GoogleServiceAccount("sa.json")


class Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.expires_at = 10_000.0
        self.threads: set[int] = set()

    def __call__(self, source: GoogleServiceAccount) -> BearerToken:
        self.calls += 1
        self.threads.add(threading.get_ident())
        return BearerToken(token=f"token-{self.calls}", expires_at=self.expires_at)


async def token_of(tokens: AccessTokens, source: TokenSource) -> str:
    credential = await tokens.credential(source)
    assert isinstance(credential, BearerToken)
    return credential.token


async def test_cached_until_the_refresh_margin() -> None:
    now = [0.0]
    fetch = Counting()
    tokens = AccessTokens({GoogleServiceAccount: fetch}, clock=lambda: now[0])
    assert await token_of(tokens, SA) == "token-1"
    assert await token_of(tokens, SA) == "token-1"
    now[0] = fetch.expires_at - REFRESH_MARGIN_S - 1
    assert await token_of(tokens, SA) == "token-1"
    now[0] = fetch.expires_at - REFRESH_MARGIN_S + 1
    assert await token_of(tokens, SA) == "token-2"
    assert threading.get_ident() not in fetch.threads  # never on the event loop's thread


async def test_concurrent_requests_share_one_refresh() -> None:
    fetch = Counting()
    tokens = AccessTokens({GoogleServiceAccount: fetch}, clock=lambda: 0.0)
    got = await asyncio.gather(*(token_of(tokens, SA) for _ in range(20)))
    assert set(got) == {"token-1"}
    assert fetch.calls == 1


async def test_failure_is_an_upstream_error_naming_the_file_only(tmp_path: Path) -> None:
    tokens = AccessTokens()
    with pytest.raises(UpstreamConnectError, match=r"credentials in missing\.json"):
        await tokens.credential(GoogleServiceAccount(str(tmp_path / "missing.json")))


class OtherIdentity(TokenSource, frozen=True):
    """A source type no fetcher is registered for (as a later cloud identity would be)."""

    name: str

    def label(self) -> str:
        return "identity " + self.name


async def test_each_source_type_has_its_own_fetcher_and_cache_entry() -> None:
    google, other = Counting(), Counting()
    tokens = AccessTokens({GoogleServiceAccount: google, OtherIdentity: other}, clock=lambda: 0.0)
    assert await token_of(tokens, SA) == "token-1"
    assert await token_of(tokens, OtherIdentity("sa.json")) == "token-1"
    assert await token_of(tokens, GoogleServiceAccount("other.json")) == "token-2"
    assert (google.calls, other.calls) == (2, 1)


async def test_a_source_without_a_fetcher_is_a_connect_error() -> None:
    tokens = AccessTokens({GoogleServiceAccount: Counting()}, clock=lambda: 0.0)
    with pytest.raises(UpstreamConnectError, match="OtherIdentity"):
        await token_of(tokens, OtherIdentity("x"))


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGemini]:
    upstream = FakeGemini().start()
    yield upstream
    upstream.stop()


def test_google_auth_fetches_a_token_from_the_token_uri(fake: FakeGemini, tmp_path: Path) -> None:
    path = service_account_file(tmp_path, fake.base_url + "/token")
    fetched = fetch_service_account_token(GoogleServiceAccount(str(path)))
    assert fetched.token.startswith("ya29.fake-")
    assert fetched.expires_at > 0
    grant = fake.token_requests[-1]
    assert grant["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert grant["assertion"].count(".") == 2  # a signed JWT


def test_an_entra_client_secret_is_cut_from_a_library_error() -> None:
    from gateway.upstream.credentials import scrubbed

    secret = "Ab38Q~" + "x1Y2z3W4v5U6t7S8r9Q0p1O2n3M4l5K6j7"
    text = scrubbed(f"AADSTS7000215: Invalid client secret provided: '{secret}' for app c1")
    assert secret not in text
    assert "Q~" not in text
    assert "AADSTS7000215" in text
