"""The console's server side on an in-process gateway with a real sqlite store: the page and
its headers, sign-in (the master key only; wrong, static and virtual keys refused; throttled
after ten failures), the cookie's attributes, CSRF on every change (missing, wrong, another
origin), sign-out ending the session for a replayed cookie too, a session known to a second
process on the same store (another worker), the cookie opening nothing under /admin/, and the
console off (no master key; `enabled: false`)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from gateway.console.routes import CSP
from gateway.console.sessions import COOKIE
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER_KEY = "mk-console-test-0123"
STATIC_KEY = "sk-gw-static-0123456789abcdef"


def config_text(db: Path, base_url: str, extra: str = "") -> str:
    return f"""
store: {{url: "sqlite:///{db}"}}
auth: {{master_key: {MASTER_KEY}}}
providers:
  - {{name: up, kind: openai, base_url: "{base_url}", keys: [{{key: k1}}]}}
keys: [{{name: static-team, key: {STATIC_KEY}}}]
{extra}
"""


@pytest.fixture
async def fake() -> AsyncIterator[FakeOpenAI]:
    upstream = FakeOpenAI().start()
    yield upstream
    upstream.stop()


async def serve(text: str) -> TestServer:
    server = TestServer(build_app(parse_config(text, env={})), host="127.0.0.1")
    await server.start_server()
    return server


@pytest.fixture
async def gateway(tmp_path: Path, fake: FakeOpenAI) -> AsyncIterator[TestServer]:
    server = await serve(config_text(tmp_path / "gw.db", fake.base_url))
    yield server
    await server.close()


def client() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True))


async def call(
    http: aiohttp.ClientSession,
    server: TestServer,
    method: str,
    path: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any, aiohttp.ClientResponse]:
    async with http.request(
        method, server.make_url(path), json=body, headers=headers or {}, allow_redirects=False
    ) as answer:
        text = await answer.read()
        try:
            parsed: Any = await answer.json(content_type=None)
        except ValueError:
            parsed = text
        return answer.status, parsed, answer


async def sign_in(http: aiohttp.ClientSession, server: TestServer) -> str:
    status, body, _ = await call(
        http, server, "POST", "/ui/api/session", {"master_key": MASTER_KEY}
    )
    assert status == 200, body
    return str(body["csrf"])


def set_cookie(answer: aiohttp.ClientResponse) -> Any:
    cookies: SimpleCookie = SimpleCookie()
    for header in answer.headers.getall("Set-Cookie", []):
        cookies.load(header)
    return cookies[COOKIE]


async def test_the_page_and_every_answer_carry_the_strict_headers(gateway: TestServer) -> None:
    async with client() as http:
        status, body, answer = await call(http, gateway, "GET", "/ui/")
        assert status == 200
        assert answer.headers["Content-Security-Policy"] == CSP
        assert "script-src 'self'" in CSP
        assert "unsafe-inline" not in CSP
        assert answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["X-Frame-Options"] == "DENY"
        assert answer.headers["Cache-Control"] == "no-store"
        assert answer.headers["Content-Type"].startswith("text/html")
        status, _, answer = await call(http, gateway, "GET", "/ui")
        assert (status, answer.headers["Location"]) == (308, "/ui/")
        for path in ("/ui/assets/nothing.js", "/ui/assets/..%2Froutes.py", "/ui/assets/index.html"):
            status, body, answer = await call(http, gateway, "GET", path)
            assert status == 404, path
            assert answer.headers["Content-Security-Policy"] == CSP  # errors too
        status, body, answer = await call(http, gateway, "GET", "/ui/api/session")
        assert (status, body["error"]["code"]) == (401, "not_signed_in")
        assert answer.headers["Content-Security-Policy"] == CSP


async def test_assets_are_served_with_their_type_and_revalidated(gateway: TestServer) -> None:
    async with client() as http:
        _, page, _ = await call(http, gateway, "GET", "/ui/")
        links = re.findall(rb"""(?:src|href)\s*=\s*["']([^"']*)""", page)
        assert links
        for link in links:  # nothing from elsewhere: the gateway's own files, or in-page
            assert link.startswith((b"/ui/", b"#")), link
        status, _, answer = await call(http, gateway, "GET", "/ui/assets/favicon.svg")
        assert status == 200
        assert answer.headers["Content-Type"] == "image/svg+xml"
        tag = answer.headers["ETag"]
        status, _, _ = await call(
            http, gateway, "GET", "/ui/assets/favicon.svg", headers={"If-None-Match": tag}
        )
        assert status == 304


async def test_only_the_master_key_signs_in(gateway: TestServer) -> None:
    async with client() as http:
        status, created, _ = await call(
            http,
            gateway,
            "POST",
            "/admin/keys",
            {"name": "virtual"},
            {"Authorization": f"Bearer {MASTER_KEY}"},
        )
        assert status == 201, created
        for wrong in (STATIC_KEY, created["key"], MASTER_KEY + "x", MASTER_KEY[:-1], " "):
            status, body, answer = await call(
                http, gateway, "POST", "/ui/api/session", {"master_key": wrong}
            )
            assert status in (400, 401), wrong
            assert "Set-Cookie" not in answer.headers
        for bad in (None, {"master_key": 1}, [MASTER_KEY]):
            status, body, _ = await call(http, gateway, "POST", "/ui/api/session", bad)
            assert (status, body["error"]["code"]) == (400, "invalid_body")
        status, _, _ = await call(http, gateway, "GET", "/ui/api/keys")
        assert status == 401


async def test_the_cookie_is_httponly_strict_and_secure_behind_https(gateway: TestServer) -> None:
    async with client() as http:
        status, body, answer = await call(
            http, gateway, "POST", "/ui/api/session", {"master_key": MASTER_KEY}
        )
        assert status == 200
        assert MASTER_KEY not in str(body)
        cookie = set_cookie(answer)
        assert cookie["httponly"] is True
        assert cookie["samesite"] == "Strict"
        assert cookie["path"] == "/ui"
        assert cookie["max-age"] == "28800"
        assert not cookie["secure"]  # plain http: a Secure cookie would never come back
        assert len(cookie.value) >= 40
    async with client() as http:
        status, _, answer = await call(
            http,
            gateway,
            "POST",
            "/ui/api/session",
            {"master_key": MASTER_KEY},
            {"X-Forwarded-Proto": "https"},
        )
        assert status == 200
        assert set_cookie(answer)["secure"] is True


async def test_every_change_needs_the_csrf_token_and_this_origin(gateway: TestServer) -> None:
    async with client() as http:
        csrf = await sign_in(http, gateway)
        status, keys, _ = await call(http, gateway, "GET", "/ui/api/keys")
        assert status == 200, keys
        attempts: list[dict[str, str]] = [
            {},
            {"X-CSRF-Token": "wrong"},
            {"X-CSRF-Token": csrf, "Origin": "http://evil.example"},
        ]
        for headers in attempts:
            status, body, _ = await call(
                http, gateway, "POST", "/ui/api/keys", {"name": "nope"}, headers
            )
            assert (status, body["error"]["code"]) == (403, "csrf_failed"), headers
        host = f"http://127.0.0.1:{gateway.port}"
        status, created, _ = await call(
            http,
            gateway,
            "POST",
            "/ui/api/keys",
            {"name": "made-in-console"},
            {"X-CSRF-Token": csrf, "Origin": host},
        )
        assert status == 201, created
        assert created["key"].startswith("sk-")  # the secret, this once
        key_id = created["id"]
        status, listed, _ = await call(http, gateway, "GET", "/ui/api/keys")
        assert created["key"] not in str(listed)
        status, _, _ = await call(http, gateway, "DELETE", f"/ui/api/keys/{key_id}")
        assert status == 403
        status, revoked, _ = await call(
            http, gateway, "DELETE", f"/ui/api/keys/{key_id}", headers={"X-CSRF-Token": csrf}
        )
        assert status == 200, revoked
        for path in ("/ui/api/health", "/ui/api/config", "/ui/api/spend", "/ui/api/overview"):
            status, body, _ = await call(http, gateway, "GET", path)
            assert status == 200, (path, body)
        status, config, _ = await call(http, gateway, "GET", "/ui/api/config")
        assert MASTER_KEY not in str(config)
        assert STATIC_KEY not in str(config)


async def test_the_cookie_opens_nothing_under_admin(gateway: TestServer) -> None:
    async with client() as http:
        csrf = await sign_in(http, gateway)
        for method, path in (("GET", "/admin/keys"), ("POST", "/admin/keys")):
            status, body, _ = await call(
                http, gateway, method, path, {"name": "x"}, {"X-CSRF-Token": csrf}
            )
            assert status == 401, (path, body)


async def test_sign_out_ends_the_session_for_a_replayed_cookie_too(gateway: TestServer) -> None:
    async with client() as http:
        csrf = await sign_in(http, gateway)
        token = next(c.value for c in http.cookie_jar if c.key == COOKIE)
        status, body, answer = await call(
            http, gateway, "DELETE", "/ui/api/session", headers={"X-CSRF-Token": csrf}
        )
        assert (status, body) == (200, {"signed_in": False})
        assert set_cookie(answer).value == ""
    async with aiohttp.ClientSession() as http:
        status, body, _ = await call(
            http, gateway, "GET", "/ui/api/keys", headers={"Cookie": f"{COOKIE}={token}"}
        )
        assert (status, body["error"]["code"]) == (401, "not_signed_in")
        forged = "A" * 43
        status, _, _ = await call(
            http, gateway, "GET", "/ui/api/keys", headers={"Cookie": f"{COOKIE}={forged}"}
        )
        assert status == 401


async def test_a_session_is_known_to_another_process_on_the_store(
    tmp_path: Path, fake: FakeOpenAI
) -> None:
    text = config_text(tmp_path / "gw.db", fake.base_url)
    first, second = await serve(text), await serve(text)
    try:
        async with client() as http:
            await sign_in(http, first)
            token = next(c.value for c in http.cookie_jar if c.key == COOKIE)
        async with aiohttp.ClientSession() as http:
            status, body, _ = await call(
                http, second, "GET", "/ui/api/session", headers={"Cookie": f"{COOKIE}={token}"}
            )
            assert status == 200, body
    finally:
        await first.close()
        await second.close()


async def test_ten_failed_sign_ins_hold_the_address(gateway: TestServer) -> None:
    async with client() as http:
        for _ in range(10):
            status, _, _ = await call(
                http, gateway, "POST", "/ui/api/session", {"master_key": "guess"}
            )
            assert status == 401
        status, body, answer = await call(
            http, gateway, "POST", "/ui/api/session", {"master_key": MASTER_KEY}
        )
        assert (status, body["error"]["code"]) == (429, "too_many_sign_ins")
        assert int(answer.headers["Retry-After"]) > 0


async def test_without_a_master_key_nobody_signs_in(tmp_path: Path, fake: FakeOpenAI) -> None:
    text = config_text(tmp_path / "gw.db", fake.base_url).replace(
        f"auth: {{master_key: {MASTER_KEY}}}", ""
    )
    server = await serve(text)
    try:
        async with client() as http:
            status, _, _ = await call(http, server, "GET", "/ui/")
            assert status == 200  # the page says how to turn the console on
            for key in ("", "anything"):
                status, body, _ = await call(
                    http, server, "POST", "/ui/api/session", {"master_key": key}
                )
                assert (status, body["error"]["code"]) == (403, "console_disabled")
            status, body, _ = await call(http, server, "GET", "/ui/api/keys")
            assert (status, body["error"]["code"]) == (403, "console_disabled")
    finally:
        await server.close()


async def test_console_off_answers_404(tmp_path: Path, fake: FakeOpenAI) -> None:
    server = await serve(
        config_text(tmp_path / "gw.db", fake.base_url, "console: {enabled: false}")
    )
    try:
        async with client() as http:
            for path in ("/ui/", "/ui/api/session", "/ui/assets/favicon.svg"):
                status, _, _ = await call(http, server, "GET", path)
                assert status == 404, path
    finally:
        await server.close()


async def test_a_new_master_key_or_the_expiry_ends_a_session(monkeypatch: Any) -> None:
    from gateway.console import sessions
    from gateway.store.kv import MemoryKV

    kv = MemoryKV()
    token, session = await sessions.open_session(kv, "old-master", 60.0)
    assert await sessions.find_session(kv, token, "old-master") == session
    assert await sessions.find_session(kv, token, "new-master") is None  # rotated: out
    assert await sessions.find_session(kv, token, "") is None  # no master key: nobody
    assert await sessions.find_session(kv, token + "x", "old-master") is None
    assert await sessions.find_session(kv, "x" * 500, "old-master") is None
    later = sessions.time.time() + 61
    monkeypatch.setattr(sessions.time, "time", lambda: later)
    assert await sessions.find_session(kv, token, "old-master") is None  # expired
