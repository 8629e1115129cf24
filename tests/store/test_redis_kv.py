"""The redis backend beyond the contract, against real redis-servers: key prefix and PX
expiry, the database and password of the URL, TLS, and a server that goes away and returns."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from collections.abc import Iterator

import pytest
from redis.asyncio import Redis

from gateway.store.kv import StoreUnavailable
from gateway.store.kv import make_kv
from gateway.store.redis_kv import redacted
from tests.redis_server import RedisServer
from tests.redis_server import free_port

PASSWORD = "pw-0042-do-not-log"
WRONG = "pw-9999-also-secret"


@pytest.fixture
def locked_server() -> Iterator[RedisServer]:
    server = RedisServer(password=PASSWORD).start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[Redis]:
    """A plain client on the same server: to see what the store wrote, key by key."""
    client = Redis.from_url(redis_server.url(db=3))
    try:
        yield client
    finally:
        await client.aclose()


async def test_keys_carry_the_prefix_and_a_px_expiry(redis_server: RedisServer, raw: Redis) -> None:
    kv = make_kv(redis_server.url(db=3))
    try:
        await kv.put("resp_1", b"\x00v", 1.5)
        assert await raw.get("gw:resp_1") == b"\x00v"
        assert await raw.get("resp_1") is None
        assert 1000 < await raw.pttl("gw:resp_1") <= 1500
        await raw.set("gw:from-elsewhere", b"x")  # another writer of the same prefix
        assert await kv.get("from-elsewhere") == b"x"
    finally:
        await kv.close()


async def test_the_database_of_the_url_is_used(redis_server: RedisServer, raw: Redis) -> None:
    db0 = make_kv(redis_server.url(db=0))
    db3 = make_kv(redis_server.url(db=3))
    try:
        await db0.put("k", b"zero", 60)
        await db3.put("k", b"three", 60)
        assert (await db0.get("k"), await db3.get("k")) == (b"zero", b"three")
        assert await raw.get("gw:k") == b"three"
    finally:
        await db0.close()
        await db3.close()


async def test_right_password_works(locked_server: RedisServer) -> None:
    kv = make_kv(locked_server.url())
    try:
        await kv.put("k", b"v", 60)
        assert await kv.get("k") == b"v"
        assert await kv.ping() is True
    finally:
        await kv.close()


@pytest.mark.parametrize("password", [WRONG, ""], ids=["wrong", "none"])
async def test_wrong_or_no_password_is_unavailable_and_never_shown(
    locked_server: RedisServer, password: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = locked_server.url(password=password)
    kv = make_kv(url)
    try:
        with pytest.raises(StoreUnavailable) as raised:
            await kv.get("k")
        with pytest.raises(StoreUnavailable):
            await kv.put("k", b"v", 60)
        assert await kv.ping() is False
    finally:
        await kv.close()
    message = str(raised.value)
    assert message.startswith(f"redis store redis://127.0.0.1:{locked_server.port}/0: ")
    assert "Authentication" in message
    shown = [message, repr(raised.value), repr(raised.value.__cause__), caplog.text]
    assert not [text for text in shown if WRONG in text or PASSWORD in text]


def test_redacted_url_has_no_userinfo() -> None:
    assert redacted("rediss://user:pw@cache:6380/2") == "rediss://cache:6380/2"
    assert redacted("redis://:pw@cache") == "redis://cache"
    assert redacted("redis://cache:6379/0") == "redis://cache:6379/0"


async def test_a_server_that_goes_away_is_unavailable_until_it_returns(
    redis_server: RedisServer,
) -> None:
    kv = make_kv(redis_server.url())
    try:
        await kv.put("k", b"v", 60)
        redis_server.stop()
        assert await kv.ping() is False
        with pytest.raises(StoreUnavailable, match="ConnectionError"):
            await kv.get("k")
        with pytest.raises(StoreUnavailable):
            await kv.put("k", b"v", 60)
        redis_server.start()  # same port, empty (nothing is persisted)
        assert await kv.ping() is True
        assert await kv.get("k") is None
        await kv.put("k", b"back", 60)
        assert await kv.get("k") == b"back"
    finally:
        await kv.close()


async def test_a_server_down_from_the_start_does_not_stop_construction() -> None:
    kv = make_kv(f"redis://127.0.0.1:{free_port()}/0")  # nobody listens there
    try:
        assert await kv.ping() is False
        with pytest.raises(StoreUnavailable, match="ConnectionError"):
            await kv.get("k")
    finally:
        await kv.close()


@pytest.fixture
def tls_server() -> Iterator[RedisServer]:
    server = RedisServer(password=PASSWORD, tls=True).start()
    try:
        yield server
    finally:
        server.close()


async def test_rediss_speaks_tls_and_checks_the_certificate(
    tls_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tls_server.ca_file is not None
    url = tls_server.url()
    assert url.startswith("rediss://")
    untrusting = make_kv(url)  # the test CA is not among the system's CAs
    try:
        with pytest.raises(StoreUnavailable, match="certificate verify failed"):
            await untrusting.get("k")
    finally:
        await untrusting.close()
    # OpenSSL's SSL_CERT_FILE: how an operator trusts a private CA.
    monkeypatch.setenv("SSL_CERT_FILE", str(tls_server.ca_file))
    kv = make_kv(url)
    try:
        await kv.put("k", b"over tls", 60)
        assert await asyncio.wait_for(kv.get("k"), 5) == b"over tls"
    finally:
        await kv.close()
    plain = make_kv(url.replace("rediss://", "redis://", 1))  # a plain client on a TLS port
    try:
        assert await plain.ping() is False
    finally:
        await plain.close()
