"""The upstream pool's egress against real parts, under asyncio and uvloop: Debian's
tinyproxy as the forward proxy (CONNECT tunnels, absolute-form http, Basic auth), the fake
OpenAI upstream over TLS with a CA made for the test (a private CA, mutual TLS,
SSL_CERT_FILE), and the failures a proxy can cause as connect errors that never quote its
credentials."""

from __future__ import annotations

import asyncio
import base64
import functools
import inspect
import json
import shutil
import ssl
from collections.abc import Callable
from collections.abc import Coroutine
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from gateway.config_base import Egress
from gateway.config_base import TlsFiles
from gateway.errors import UpstreamConnectError
from gateway.errors import UpstreamStatusError
from gateway.errors import UpstreamTimeout
from gateway.providers.base import UpstreamRequest
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.openai.config import OpenAIProvider
from gateway.upstream.http_client import HttpPool
from gateway.upstream.transport import fetch_all
from tests.upstream.egress_parts import Pki
from tests.upstream.egress_parts import Tinyproxy
from tests.upstream.egress_parts import TlsOpenAI
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.skipif(
    shutil.which("openssl") is None or shutil.which("tinyproxy") is None,
    reason="needs openssl and tinyproxy (tests/install_deps.sh)",
)

PASSWORD = "pr0xy-Pa55word"
BODY = json.dumps({"model": "text", "messages": [{"role": "user", "content": "hi"}]}).encode()
ENV_NAMES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "no_proxy", "NO_PROXY", "SSL_CERT_FILE")


def on_both_loops(check: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """`check` as a test run once on asyncio's loop and once on uvloop's (the server's)."""

    @pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
    @functools.wraps(check)
    def test(loop: str, **fixtures: Any) -> None:
        factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
        with asyncio.Runner(loop_factory=factory) as runner:
            runner.run(check(**fixtures))

    signature = inspect.signature(check)
    loop = inspect.Parameter("loop", inspect.Parameter.KEYWORD_ONLY, annotation=str)
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in signature.parameters.values()]
    test.__signature__ = signature.replace(parameters=[loop, *params])  # type: ignore[attr-defined]
    return test


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki")).make()


@pytest.fixture(scope="module")
def tls_upstream(pki: Pki) -> Iterator[TlsOpenAI]:
    fake = TlsOpenAI(pki).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def mtls_upstream(pki: Pki) -> Iterator[TlsOpenAI]:
    fake = TlsOpenAI(pki, require_client_cert=True).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def http_upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture
def proxy(tmp_path: Path, tls_upstream: TlsOpenAI, mtls_upstream: TlsOpenAI) -> Iterator[Tinyproxy]:
    tiny = Tinyproxy(tmp_path, [tls_upstream.port, mtls_upstream.port]).start()
    yield tiny
    tiny.stop()


@pytest.fixture
def auth_proxy(tmp_path: Path, tls_upstream: TlsOpenAI) -> Iterator[Tinyproxy]:
    folder = tmp_path / "auth"
    folder.mkdir()
    tiny = Tinyproxy(folder, [tls_upstream.port], auth=("gw", PASSWORD)).start()
    yield tiny
    tiny.stop()


def adapter() -> OpenAIAdapter:
    return OpenAIAdapter(OpenAIProvider(name="up", base_url="https://unused"))


async def chat(pool: HttpPool, base_url: str, egress: Egress | None) -> dict[str, object]:
    request = UpstreamRequest(
        url=base_url + "/chat/completions",
        headers={"Authorization": "Bearer sk-test", "Content-Type": "application/json"},
        body=BODY,
        egress=egress,
    )
    data, _ = await fetch_all(pool, adapter(), request, connect_s=5)
    answer: dict[str, object] = json.loads(data)
    return answer


@on_both_loops
async def test_https_through_a_connect_tunnel_with_a_private_ca(
    pki: Pki, tls_upstream: TlsOpenAI, proxy: Tinyproxy
) -> None:
    egress = Egress(proxy=proxy.url, tls=TlsFiles(ca_file=str(pki.ca)))
    pool = HttpPool()
    try:
        for _ in range(3):  # one tunnel, kept alive and reused
            answer = await chat(pool, tls_upstream.base_url, egress)
            assert answer["object"] == "chat.completion"
    finally:
        pool.close()
    assert proxy.requests() == [f"CONNECT localhost:{tls_upstream.port} HTTP/1.1"]


@on_both_loops
async def test_env_https_proxy_no_proxy_and_proxy_none(
    monkeypatch: pytest.MonkeyPatch, pki: Pki, tls_upstream: TlsOpenAI, proxy: Tinyproxy
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", proxy.url)
    egress = Egress(tls=TlsFiles(ca_file=str(pki.ca)))
    pool = HttpPool()
    try:
        await chat(pool, tls_upstream.base_url, egress)
        assert len(proxy.requests()) == 1
        # `proxy: none` goes direct whatever the environment says
        await chat(pool, tls_upstream.base_url, Egress(proxy="none", tls=egress.tls))
        assert len(proxy.requests()) == 1
    finally:
        pool.close()
    monkeypatch.setenv("NO_PROXY", f"example.org, .localhost:{tls_upstream.port}")
    pool = HttpPool()
    try:
        await chat(pool, tls_upstream.base_url, egress)
    finally:
        pool.close()
    assert len(proxy.requests()) == 1  # NO_PROXY: nothing more went through the proxy


@on_both_loops
async def test_plain_http_is_sent_to_the_proxy_in_absolute_form(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, http_upstream: FakeOpenAI
) -> None:
    tiny = Tinyproxy(tmp_path, [], auth=("gw", PASSWORD)).start()
    try:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # httpoxy: never read
        monkeypatch.setenv("http_proxy", f"http://gw:{PASSWORD}@127.0.0.1:{tiny.port}")
        pool = HttpPool()
        try:
            await chat(pool, http_upstream.base_url, None)
        finally:
            pool.close()
        target = f"POST http://127.0.0.1:{http_upstream.port}/v1/chat/completions HTTP/1.1"
        assert tiny.requests() == [target]
        # the proxy's credentials are for the proxy: tinyproxy does not pass them on
        assert "proxy-authorization" not in {k.lower() for k in http_upstream.requests[-1].headers}
        # no credentials: the proxy answers 407 itself, a connect failure of the attempt
        monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{tiny.port}")
        pool = HttpPool()
        try:
            with pytest.raises(UpstreamConnectError) as caught:
                await chat(pool, http_upstream.base_url, None)
            assert caught.value.message == (
                f"proxy 127.0.0.1:{tiny.port} refused the request: HTTP 407 "
                "(proxy authentication required or wrong)"
            )
            # a wrong password: tinyproxy 1.11 answers 401 (with WWW-Authenticate), which
            # reads as the upstream's; still a retryable failure, so the attempt moves on
            monkeypatch.setenv("http_proxy", f"http://gw:not-{PASSWORD}@127.0.0.1:{tiny.port}")
            pool.close()
            pool = HttpPool()
            with pytest.raises(UpstreamStatusError) as refused:
                await chat(pool, http_upstream.base_url, None)
            assert refused.value.retryable
            assert PASSWORD not in refused.value.message
        finally:
            pool.close()
    finally:
        tiny.stop()


@on_both_loops
async def test_proxy_auth_and_a_wrong_password(
    pki: Pki, tls_upstream: TlsOpenAI, auth_proxy: Tinyproxy
) -> None:
    tls = TlsFiles(ca_file=str(pki.ca))
    good = Egress(proxy=f"http://gw:{PASSWORD}@127.0.0.1:{auth_proxy.port}", tls=tls)
    bad = Egress(proxy=f"http://gw:not-{PASSWORD}@127.0.0.1:{auth_proxy.port}", tls=tls)
    pool = HttpPool()
    try:
        await chat(pool, tls_upstream.base_url, good)
        with pytest.raises(UpstreamConnectError) as caught:
            await chat(pool, tls_upstream.base_url, bad)
        message = caught.value.message
        refused = f"proxy 127.0.0.1:{auth_proxy.port} refused CONNECT to localhost:"
        # tinyproxy 1.11 answers a wrong password with 401, missing credentials with 407
        assert message == f"{refused}{tls_upstream.port}: HTTP 401 Unauthorized"
        assert PASSWORD not in message
        assert "gw" not in message
        anonymous = Egress(proxy=f"http://127.0.0.1:{auth_proxy.port}", tls=tls)
        with pytest.raises(UpstreamConnectError) as caught:
            await chat(pool, tls_upstream.base_url, anonymous)
        expected = f"{refused}{tls_upstream.port}: HTTP 407 Proxy Authentication Required"
        assert caught.value.message == expected
        # two profiles, two sets of connections: the good one's tunnel is not lent out
        assert {key[3] for key in pool._idle} == {good}
    finally:
        pool.close()


@on_both_loops
async def test_a_refused_connect_and_a_proxy_that_is_down(
    pki: Pki, tls_upstream: TlsOpenAI, http_upstream: FakeOpenAI, proxy: Tinyproxy
) -> None:
    tls = TlsFiles(ca_file=str(pki.ca))
    pool = HttpPool()
    try:
        # tinyproxy allows CONNECT only to the TLS upstreams' ports: 403 here
        with pytest.raises(UpstreamConnectError, match="refused CONNECT") as caught:
            await chat(pool, f"https://localhost:{http_upstream.port}/v1", Egress(proxy.url, tls))
        assert "HTTP 403" in caught.value.message
        proxy.stop()
        with pytest.raises(UpstreamConnectError) as caught:
            await chat(pool, tls_upstream.base_url, Egress(proxy=proxy.url, tls=tls))
        assert caught.value.message.startswith(
            f"cannot connect to proxy 127.0.0.1:{proxy.port} (for localhost:{tls_upstream.port})"
        )
    finally:
        pool.close()


@on_both_loops
async def test_connect_s_covers_a_proxy_that_never_answers(
    pki: Pki, tls_upstream: TlsOpenAI
) -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)

    server = await asyncio.start_server(silent, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    pool = HttpPool()
    loop = asyncio.get_running_loop()
    request = UpstreamRequest(
        url=tls_upstream.base_url + "/chat/completions",
        body=BODY,
        egress=Egress(proxy=f"http://127.0.0.1:{port}", tls=TlsFiles(ca_file=str(pki.ca))),
    )
    started = loop.time()
    try:
        with pytest.raises(UpstreamTimeout, match=f"through proxy 127.0.0.1:{port} took over"):
            await fetch_all(pool, adapter(), request, connect_s=0.3)
    finally:
        pool.close()
        for writer in accepted:
            writer.close()
        server.close()
        await server.wait_closed()
    assert 0.25 < loop.time() - started < 2


@on_both_loops
async def test_without_the_private_ca_the_handshake_fails_clearly(
    tls_upstream: TlsOpenAI, proxy: Tinyproxy
) -> None:
    pool = HttpPool()
    try:
        with pytest.raises(UpstreamConnectError) as caught:
            await chat(pool, tls_upstream.base_url, Egress(proxy=proxy.url))
        with pytest.raises(UpstreamConnectError) as direct:
            await chat(pool, tls_upstream.base_url, None)
    finally:
        pool.close()
    assert caught.value.message.startswith(
        f"TLS with localhost:{tls_upstream.port} through proxy 127.0.0.1:{proxy.port} failed: "
        "certificate verify failed"
    )
    assert "providers[].tls.ca_file or SSL_CERT_FILE" in caught.value.message
    assert direct.value.message.startswith(f"TLS with localhost:{tls_upstream.port} failed:")


@on_both_loops
async def test_a_ca_that_did_not_sign_the_upstream_is_refused(
    pki: Pki, tls_upstream: TlsOpenAI
) -> None:
    pool = HttpPool()
    try:
        with pytest.raises(UpstreamConnectError, match="certificate verify failed"):
            await chat(pool, tls_upstream.base_url, Egress(tls=TlsFiles(ca_file=str(pki.other_ca))))
    finally:
        pool.close()


@on_both_loops
async def test_mutual_tls_through_the_proxy(
    pki: Pki, mtls_upstream: TlsOpenAI, proxy: Tinyproxy
) -> None:
    with_cert = TlsFiles(
        ca_file=str(pki.ca),
        client_cert_file=str(pki.client_cert),
        client_key_file=str(pki.client_key),
    )
    pool = HttpPool()
    try:
        answer = await chat(pool, mtls_upstream.base_url, Egress(proxy=proxy.url, tls=with_cert))
        assert answer["object"] == "chat.completion"
        # no certificate: the server ends the handshake (TLS 1.3: at the first read)
        with pytest.raises(UpstreamConnectError):
            await chat(pool, mtls_upstream.base_url, Egress(tls=TlsFiles(ca_file=str(pki.ca))))
    finally:
        pool.close()


@on_both_loops
async def test_ssl_cert_file_sets_the_default_trust(
    monkeypatch: pytest.MonkeyPatch, pki: Pki, tls_upstream: TlsOpenAI
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    pool = HttpPool()
    try:
        answer = await chat(pool, tls_upstream.base_url, None)
    finally:
        pool.close()
    assert answer["object"] == "chat.completion"


def test_server_context_is_not_shared_with_a_client_context(pki: Pki) -> None:
    # guards the fixture itself: the fake requires a certificate only where asked
    assert TlsOpenAI(pki).context.verify_mode == ssl.CERT_NONE


async def _fake_proxy(answer: bytes) -> tuple[asyncio.Server, int, list[bytes]]:
    """A proxy that reads the CONNECT head, writes `answer` and closes."""
    heads: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        heads.append(await reader.readuntil(b"\r\n\r\n"))
        writer.write(answer)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], heads


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"SSH-2.0-OpenSSH\r\n\r\n", "gave no answer to CONNECT to upstream.test:443: not an HTTP"),
        (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * 20000, "an answer head over 16 KiB"),
        (b"HTTP/1.1 200 Conn", "gave no answer to CONNECT to upstream.test:443: the proxy closed"),
        (
            b"HTTP/1.1 502 Bad\x1b[2J Gateway\r\n\r\n",
            "refused CONNECT to upstream.test:443: HTTP 502 Bad[2J Gateway",
        ),
        # a 2xx, then the proxy hangs up instead of relaying: the TLS handshake fails
        (b"HTTP/1.1 200 Connection established\r\n\r\n", "upstream.test:443"),
    ],
)
@on_both_loops
async def test_a_proxy_that_answers_badly(answer: bytes, message: str) -> None:
    server, port, heads = await _fake_proxy(answer)
    pool = HttpPool()
    request = UpstreamRequest(
        url="https://upstream.test/v1/chat/completions",
        body=BODY,
        egress=Egress(proxy=f"http://gw:{PASSWORD}@127.0.0.1:{port}"),
    )
    try:
        with pytest.raises(UpstreamConnectError) as caught:
            await fetch_all(pool, adapter(), request, connect_s=5)
    finally:
        pool.close()
        server.close()
        await server.wait_closed()
    assert message in caught.value.message
    assert PASSWORD not in caught.value.message
    assert "\x1b" not in caught.value.message
    # what the proxy was sent: the CONNECT in authority form, Basic credentials for it only
    expected_auth = base64.b64encode(f"gw:{PASSWORD}".encode()).decode()
    assert heads[0].startswith(b"CONNECT upstream.test:443 HTTP/1.1\r\nHost: upstream.test:443\r\n")
    assert f"Proxy-Authorization: Basic {expected_auth}\r\n".encode() in heads[0]


@on_both_loops
async def test_an_unusable_environment_proxy_names_its_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTPS_PROXY", f"socks5://gw:{PASSWORD}@127.0.0.1:1080")
    pool = HttpPool()
    try:
        with pytest.raises(UpstreamConnectError) as caught:
            await chat(pool, "https://upstream.test/v1", None)
    finally:
        pool.close()
    assert caught.value.message == (
        "the proxy in HTTPS_PROXY uses scheme socks5://; only http:// proxies are supported "
        "(CONNECT for https)"
    )
