"""Egress end to end: a real gateway process (uvloop) reached with openai-python, its
upstreams (the fake OpenAI upstream over TLS with a CA made for the test, and over plain
http) behind Debian's tinyproxy; what went through the proxy is read back from its log.
A wrong proxy password is a connect failure that fails over, and the password appears in
no answer, log line or metric."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import free_port
from tests.e2e.conftest import stop_gateway
from tests.e2e.conftest import wait_healthy
from tests.upstream.egress_parts import Pki
from tests.upstream.egress_parts import Tinyproxy
from tests.upstream.egress_parts import TlsOpenAI
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(
        shutil.which("openssl") is None or shutil.which("tinyproxy") is None,
        reason="needs openssl and tinyproxy (tests/install_deps.sh)",
    ),
]

PASSWORD = "Egress-pr0xy-pw"
ENV_NAMES = ("https_proxy", "HTTPS_PROXY", "http_proxy", "no_proxy", "NO_PROXY", "SSL_CERT_FILE")
MESSAGES: list[dict[str, str]] = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("pki")).make()


@pytest.fixture(scope="module")
def tls_upstream(pki: Pki) -> Iterator[TlsOpenAI]:
    fake = TlsOpenAI(pki).start()
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def http_upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


@pytest.fixture
def proxy(tmp_path: Path, tls_upstream: TlsOpenAI) -> Iterator[Tinyproxy]:
    folder = tmp_path / "proxy"
    folder.mkdir()
    tiny = Tinyproxy(folder, [tls_upstream.port], auth=("gw", PASSWORD)).start()
    yield tiny
    tiny.stop()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)


def config(tls_upstream: TlsOpenAI, http_upstream: FakeOpenAI, extra: str = "") -> str:
    return f"""
store: {{url: "memory://"}}
routing: {{cooldown_s: 0.001, auth_hold_s: 0.001, circuit_failures: 1000}}
providers:
  - {{name: secure, kind: openai, base_url: "{tls_upstream.base_url}",
     keys: [{{key: sk-t}}]{extra}}}
  - {{name: plain, kind: openai, base_url: "{http_upstream.base_url}", keys: [{{key: sk-p}}]}}
models:
  - {{name: secure, targets: [{{provider: secure, model: text}}]}}
  - {{name: plain, targets: [{{provider: plain, model: text}}]}}
  - name: failover
    targets:
      - {{provider: secure, model: text, priority: 0}}
      - {{provider: plain, model: text, priority: 1}}
"""


@pytest.fixture
def run_gateway() -> Iterator[list[Gateway]]:
    started: list[Gateway] = []
    yield started
    for gw in started:
        stop_gateway(gw)


def serve(started: list[Gateway], text: str, tmp_path: Path, **env: str) -> Gateway:
    """A gateway process with `env` added to its environment only (the test's own clients
    must not go through the proxy)."""
    folder = tmp_path / f"gw{len(started)}"
    folder.mkdir()
    (folder / "gateway.yaml").write_text(text)
    port = free_port()
    log = folder / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "gateway", "serve", "--config", folder / "gateway.yaml"),
                *("--host", "127.0.0.1", "--port", str(port)),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1", **env},
        )
    gw = Gateway(f"http://127.0.0.1:{port}", proc, log)
    started.append(gw)
    try:
        wait_healthy(gw.url, proc)
    except RuntimeError:
        raise RuntimeError(log.read_text()) from None
    return gw


def chat_both_ways(gw: Gateway, model: str) -> None:
    client = openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=20)
    answer = client.chat.completions.create(model=model, messages=MESSAGES)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == "Hello, world!"
    stream = client.chat.completions.create(model=model, messages=MESSAGES, stream=True)  # type: ignore[arg-type]
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "Hello, world!"


def metrics(gw: Gateway) -> str:
    with urllib.request.urlopen(gw.url + "/metrics", timeout=5) as response:
        return str(response.read().decode())


def test_https_and_http_upstreams_through_the_environments_proxy(
    tmp_path: Path,
    pki: Pki,
    tls_upstream: TlsOpenAI,
    http_upstream: FakeOpenAI,
    proxy: Tinyproxy,
    run_gateway: list[Gateway],
) -> None:
    with_auth = f"http://gw:{PASSWORD}@127.0.0.1:{proxy.port}"
    env = {"HTTPS_PROXY": with_auth, "http_proxy": with_auth, "SSL_CERT_FILE": str(pki.ca)}
    gw = serve(run_gateway, config(tls_upstream, http_upstream), tmp_path, **env)
    chat_both_ways(gw, "secure")
    chat_both_ways(gw, "plain")
    requests = proxy.requests()
    assert f"CONNECT localhost:{tls_upstream.port} HTTP/1.1" in requests
    assert f"POST http://127.0.0.1:{http_upstream.port}/v1/chat/completions HTTP/1.1" in requests
    assert set(requests) == {
        f"CONNECT localhost:{tls_upstream.port} HTTP/1.1",
        f"POST http://127.0.0.1:{http_upstream.port}/v1/chat/completions HTTP/1.1",
    }
    assert PASSWORD not in gw.log.read_text()
    assert PASSWORD not in metrics(gw)


def test_no_proxy_reaches_the_upstreams_directly(
    tmp_path: Path,
    pki: Pki,
    tls_upstream: TlsOpenAI,
    http_upstream: FakeOpenAI,
    proxy: Tinyproxy,
    run_gateway: list[Gateway],
) -> None:
    with_auth = f"http://gw:{PASSWORD}@127.0.0.1:{proxy.port}"
    env = {"https_proxy": with_auth, "http_proxy": with_auth, "SSL_CERT_FILE": str(pki.ca)}
    env["no_proxy"] = "localhost, 127.0.0.0/8"
    gw = serve(run_gateway, config(tls_upstream, http_upstream), tmp_path, **env)
    chat_both_ways(gw, "secure")
    chat_both_ways(gw, "plain")
    assert proxy.requests() == []


def test_a_wrong_proxy_password_fails_over_and_is_never_shown(
    tmp_path: Path,
    pki: Pki,
    tls_upstream: TlsOpenAI,
    http_upstream: FakeOpenAI,
    proxy: Tinyproxy,
    run_gateway: list[Gateway],
) -> None:
    # https goes through the proxy with a wrong password; plain http goes direct
    wrong = f"http://gw:wrong-{PASSWORD}@127.0.0.1:{proxy.port}"
    env = {"https_proxy": wrong, "SSL_CERT_FILE": str(pki.ca)}
    gw = serve(run_gateway, config(tls_upstream, http_upstream), tmp_path, **env)
    client = openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=20)
    for stream in (False, True):
        raw = client.chat.completions.with_raw_response.create(
            model="failover",
            messages=MESSAGES,  # type: ignore[arg-type]
            stream=stream,
        )
        assert raw.headers["x-gateway-provider"] == "plain"
        assert raw.headers["x-gateway-attempts"] == "2"
        assert PASSWORD not in str(dict(raw.headers))
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="secure", messages=MESSAGES)  # type: ignore[arg-type]
    assert caught.value.status_code in (502, 503)
    shown = str(caught.value.body)
    assert f"proxy 127.0.0.1:{proxy.port} refused CONNECT to localhost:{tls_upstream.port}" in shown
    assert PASSWORD not in shown
    assert "gw:" not in shown
    assert f"CONNECT localhost:{tls_upstream.port} HTTP/1.1" in proxy.requests()
    log = gw.log.read_text()
    assert PASSWORD not in log
    assert PASSWORD not in metrics(gw)


def test_without_the_ca_the_handshake_fails_with_a_clear_error(
    tmp_path: Path,
    tls_upstream: TlsOpenAI,
    http_upstream: FakeOpenAI,
    run_gateway: list[Gateway],
) -> None:
    assert "SSL_CERT_FILE" not in os.environ
    gw = serve(run_gateway, config(tls_upstream, http_upstream), tmp_path)
    client = openai.OpenAI(base_url=gw.v1, api_key="any", max_retries=0, timeout=20)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model="secure", messages=MESSAGES)  # type: ignore[arg-type]
    shown = str(caught.value.body)
    assert f"TLS with localhost:{tls_upstream.port} failed: certificate verify failed" in shown
    assert "providers[].tls.ca_file or SSL_CERT_FILE" in shown


def test_a_providers_own_proxy_and_ca(
    tmp_path: Path,
    pki: Pki,
    tls_upstream: TlsOpenAI,
    http_upstream: FakeOpenAI,
    proxy: Tinyproxy,
    run_gateway: list[Gateway],
) -> None:
    extra = f', proxy: "http://gw:{PASSWORD}@127.0.0.1:{proxy.port}", tls: {{ca_file: "{pki.ca}"}}'
    gw = serve(run_gateway, config(tls_upstream, http_upstream, extra), tmp_path)
    chat_both_ways(gw, "secure")
    assert proxy.requests() == [f"CONNECT localhost:{tls_upstream.port} HTTP/1.1"]


def test_proxy_none_bypasses_the_environments_proxy(
    tmp_path: Path,
    pki: Pki,
    tls_upstream: TlsOpenAI,
    http_upstream: FakeOpenAI,
    proxy: Tinyproxy,
    run_gateway: list[Gateway],
) -> None:
    wrong = f"http://gw:wrong-{PASSWORD}@127.0.0.1:{proxy.port}"
    extra = f', proxy: none, tls: {{ca_file: "{pki.ca}"}}'
    gw = serve(run_gateway, config(tls_upstream, http_upstream, extra), tmp_path, https_proxy=wrong)
    chat_both_ways(gw, "secure")
    assert proxy.requests() == []
