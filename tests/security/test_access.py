"""Who may call what: admin routes need the master key, virtual keys cannot read or change
other keys, the master key is compared in constant time (virtual keys are looked up by
hash, never compared), and a revoked or expired key is refused at once by every worker of a
gateway on sqlite (`--workers 2`) and by every replica sharing one redis.
"""

from __future__ import annotations

import asyncio
import calendar
import hashlib
import hmac
import json
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from gateway.accounting.service import Accounting
from gateway.config import parse_config
from gateway.store.ledger import make_ledger
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.redis_server import RedisServer

pytestmark = pytest.mark.e2e

MASTER = "sk-master-access-7e21"
STATIC = "sk-static-access-90c4"


def config(store: str) -> str:
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: "{store}"}}
providers: [{{name: mock, kind: mock}}]
models: [{{name: mock, targets: [{{provider: mock, model: mock}}]}}]
keys: [{{name: static, key: {STATIC}}}]
"""


async def call(
    url: str, method: str, path: str, key: str | None, body: Any = None
) -> tuple[int, dict[str, Any]]:
    """One request on a connection of its own (so that SO_REUSEPORT spreads them)."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    timeout = aiohttp.ClientTimeout(total=20)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.request(method, url + path, json=body, headers=headers) as response,
    ):
        return response.status, json.loads(await response.read())


CHAT = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def sqlite_pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gw-access")
    gateway = start_gateway(config(f"sqlite:///{tmp / 'gw.db'}"), tmp, ["--workers", "2"])
    try:
        yield gateway
    finally:
        stop_gateway(gateway)


async def test_admin_routes_need_the_master_key(sqlite_pair: Gateway) -> None:
    url = sqlite_pair.url
    status, mine = await call(url, "POST", "/admin/keys", MASTER, {"name": "mine"})
    assert status == 201
    status, other = await call(url, "POST", "/admin/keys", MASTER, {"name": "other"})
    assert status == 201
    routes = [
        ("POST", "/admin/keys", {"name": "sneaky"}),
        ("GET", "/admin/keys", None),
        ("GET", f"/admin/keys/{other['id']}", None),
        ("GET", f"/admin/keys/{mine['id']}", None),
        ("DELETE", f"/admin/keys/{other['id']}", None),
        ("GET", "/admin/spend", None),
        ("GET", "/admin/health", None),
    ]
    for method, path, body in routes:
        for key, want in ((None, 401), ("sk-not-a-key", 401), (mine["key"], 403), (STATIC, 403)):
            status, answer = await call(url, method, path, key, body)
            assert status == want, (method, path, key, answer)
            if want == 403:
                assert answer["error"]["code"] == "master_key_required"
    # nothing changed: the other key still works and was not revoked; no key was made
    assert (await call(url, "POST", "/v1/chat/completions", other["key"], CHAT))[0] == 200
    status, listed = await call(url, "GET", "/admin/keys", MASTER)
    assert status == 200
    assert "sneaky" not in {k["name"] for k in listed["data"]}
    assert not any(k["revoked"] for k in listed["data"] if k["id"] == other["id"])


def test_master_key_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    accounting = Accounting(parse_config(config("memory://"), {}), make_ledger("memory://"))
    compared: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        compared.append((a, b))
        return real(a, b)

    class NoEquality(str):
        """A token that fails the test if anything compares it with `==`."""

        def __eq__(self, other: object) -> bool:
            raise AssertionError("a key was compared with ==")

        __hash__ = str.__hash__

    monkeypatch.setattr("gateway.accounting.service.hmac.compare_digest", spy)
    assert accounting.principal(MASTER).kind == "master"
    assert compared == [(MASTER.encode(), MASTER.encode())]
    guess = NoEquality("sk-master-access-7e2X")
    principal = accounting.principal(guess)
    assert principal.kind == "virtual"
    assert compared[-1] == (guess.encode(), MASTER.encode())
    # a virtual key is found by the sha256 of its secret: a hash lookup, never a comparison
    static = accounting.principal(NoEquality(STATIC))
    assert static.secret_hash == hashlib.sha256(STATIC.encode()).hexdigest()
    assert static.static is not None
    assert static.static.name == "static"


async def refused_everywhere(urls: list[str], key: str, code: str, times: int) -> list[int]:
    answers = await asyncio.gather(
        *(
            call(urls[i % len(urls)], "POST", "/v1/chat/completions", key, CHAT)
            for i in range(times)
        )
    )
    assert all(s == 401 and a["error"]["code"] == code for s, a in answers), answers
    return [s for s, _ in answers]


def pids_answering(gw: Gateway, status: int, since: float) -> set[int]:
    pids = set()
    for line in gw.log.read_text().splitlines():
        if line.startswith("{") and f'"status":{status}' in line:
            entry = json.loads(line)
            ts = calendar.timegm(time.strptime(entry["ts"][:19], "%Y-%m-%dT%H:%M:%S"))
            if ts >= since - 1 and entry["route"] == "/v1/chat/completions":
                pids.add(entry["pid"])
    return pids


async def test_revoked_and_expired_keys_are_refused_by_every_worker(sqlite_pair: Gateway) -> None:
    url = sqlite_pair.url
    _, made = await call(url, "POST", "/admin/keys", MASTER, {"name": "soon-revoked"})
    expires = time.time() + 2.0
    _, brief = await call(
        url, "POST", "/admin/keys", MASTER, {"name": "brief", "expires_at": expires}
    )
    for key in (made["key"], brief["key"]):
        oks = await asyncio.gather(
            *(call(url, "POST", "/v1/chat/completions", key, CHAT) for _ in range(6))
        )
        assert all(s == 200 for s, _ in oks)
    since = time.time()
    assert (await call(url, "DELETE", f"/admin/keys/{made['id']}", MASTER))[0] == 200
    await refused_everywhere([url], made["key"], "key_revoked", 24)
    await asyncio.sleep(max(0.0, expires - time.time()) + 0.05)
    await refused_everywhere([url], brief["key"], "key_expired", 24)
    await asyncio.sleep(0.5)  # the access log leaves in batches
    assert len(pids_answering(sqlite_pair, 401, since)) == 2, "one worker answered them all"


@pytest.fixture(scope="module")
def redis_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Gateway]]:
    redis = RedisServer().start()
    text = config(redis.url())
    first = start_gateway(text, tmp_path_factory.mktemp("gw-replica-a"))
    second = start_gateway(text, tmp_path_factory.mktemp("gw-replica-b"))
    try:
        yield [first, second]
    finally:
        stop_gateway(first)
        stop_gateway(second)
        redis.close()


async def test_revocation_through_one_replica_holds_on_the_other(
    redis_replicas: list[Gateway],
) -> None:
    a, b = (gw.url for gw in redis_replicas)
    _, made = await call(a, "POST", "/admin/keys", MASTER, {"name": "shared"})
    assert (await call(b, "POST", "/v1/chat/completions", made["key"], CHAT))[0] == 200
    status, other_view = await call(b, "GET", f"/admin/keys/{made['id']}", MASTER)
    assert status == 200
    assert other_view["revoked"] is False
    assert (await call(a, "DELETE", f"/admin/keys/{made['id']}", MASTER))[0] == 200
    status, answer = await call(b, "POST", "/v1/chat/completions", made["key"], CHAT)
    assert (status, answer["error"]["code"]) == (401, "key_revoked")
    await refused_everywhere([a, b], made["key"], "key_revoked", 8)
    expires = time.time() + 1.0
    _, brief = await call(b, "POST", "/admin/keys", MASTER, {"name": "b", "expires_at": expires})
    assert (await call(a, "POST", "/v1/chat/completions", brief["key"], CHAT))[0] == 200
    await asyncio.sleep(max(0.0, expires - time.time()) + 0.05)
    await refused_everywhere([a, b], brief["key"], "key_expired", 4)
