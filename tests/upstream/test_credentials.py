"""Vertex access tokens: fetched with google-auth off the loop, cached, refreshed, shared."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gateway.errors import UpstreamConnectError
from gateway.upstream.credentials import REFRESH_MARGIN_S, AccessTokens, fetch_token
from tests.upstreams.gemini_upstream import FakeGemini
from tests.vertex_credentials import service_account_file


class Counting:
    def __init__(self) -> None:
        self.calls = 0
        self.expires_at = 10_000.0
        self.threads: set[int] = set()

    def __call__(self, path: str) -> tuple[str, float]:
        self.calls += 1
        self.threads.add(threading.get_ident())
        return f"token-{self.calls}", self.expires_at


async def test_cached_until_the_refresh_margin() -> None:
    now = [0.0]
    fetch = Counting()
    tokens = AccessTokens(fetch, clock=lambda: now[0])
    assert await tokens.token("sa.json") == "token-1"
    assert await tokens.token("sa.json") == "token-1"
    now[0] = fetch.expires_at - REFRESH_MARGIN_S - 1
    assert await tokens.token("sa.json") == "token-1"
    now[0] = fetch.expires_at - REFRESH_MARGIN_S + 1
    assert await tokens.token("sa.json") == "token-2"
    assert threading.get_ident() not in fetch.threads  # never on the event loop's thread


async def test_concurrent_requests_share_one_refresh() -> None:
    fetch = Counting()
    tokens = AccessTokens(fetch, clock=lambda: 0.0)
    got = await asyncio.gather(*(tokens.token("sa.json") for _ in range(20)))
    assert set(got) == {"token-1"}
    assert fetch.calls == 1


async def test_failure_is_an_upstream_error_naming_the_file_only(tmp_path: Path) -> None:
    tokens = AccessTokens()
    with pytest.raises(UpstreamConnectError, match=r"credentials in missing\.json"):
        await tokens.token(str(tmp_path / "missing.json"))


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeGemini]:
    upstream = FakeGemini().start()
    yield upstream
    upstream.stop()


def test_google_auth_fetches_a_token_from_the_token_uri(fake: FakeGemini, tmp_path: Path) -> None:
    path = service_account_file(tmp_path, fake.base_url + "/token")
    token, expires_at = fetch_token(str(path))
    assert token.startswith("ya29.fake-")
    assert expires_at > 0
    grant = fake.token_requests[-1]
    assert grant["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert grant["assertion"].count(".") == 2  # a signed JWT
