"""Azure OpenAI `identity: default` keys through a real gateway: the token comes from a
fake Entra ID authority over TLS (tests/identity_endpoints/entra.py, the test CA trusted
with REQUESTS_CA_BUNDLE or the provider's tls.ca_file), for AKS workload identity (a
federated token file) and for a client secret (EnvironmentCredential), and the fake Azure
OpenAI accepts only a Bearer that authority issued, for the Cognitive Services scope and
unexpired. Chat (unary and streamed) and embeddings on one token fetch, a short-lived token
refreshed before it expires under load, failover to a static api-key key when the authority
is down, and a clear 502 naming the identity (no token, no secret) when no key is left."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import openai
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import parse_config
from tests.e2e.conftest import free_port
from tests.e2e.conftest import wait_healthy
from tests.identity_endpoints.azure_bearer import BearerAzure
from tests.identity_endpoints.entra import CLIENT_ID
from tests.identity_endpoints.entra import CLIENT_SECRET
from tests.identity_endpoints.entra import FEDERATED_TOKEN
from tests.identity_endpoints.entra import JWT_BEARER
from tests.identity_endpoints.entra import SCOPE
from tests.identity_endpoints.entra import TENANT
from tests.identity_endpoints.entra import FakeEntra
from tests.identity_endpoints.isolation import isolate
from tests.identity_endpoints.isolation import isolated_env
from tests.upstream.egress_parts import Pki

CHAT = [{"role": "user", "content": "hi"}]
TEXT = "Hello, world!"
HEADERS = {"authorization": "Bearer mk-test"}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(tmp_path_factory.mktemp("entra-pki")).make()


@pytest.fixture
def entra(pki: Pki) -> Iterator[FakeEntra]:
    fake = FakeEntra(pki).start()
    yield fake
    fake.stop()


@pytest.fixture
def azure(entra: FakeEntra) -> Iterator[BearerAzure]:
    fake = BearerAzure(entra).start()
    yield fake
    fake.stop()


def entra_env(
    monkeypatch: pytest.MonkeyPatch,
    tmp: Path,
    entra: FakeEntra,
    pki: Pki,
    *,
    secret: bool = False,
    trust: str = "requests",
) -> None:
    """The environment AKS's webhook gives a pod (or, with `secret`, a service principal's);
    the test CA trusted by `trust`: "requests" (REQUESTS_CA_BUNDLE, SSL_CERT_FILE unset: the
    gateway prefers SSL_CERT_FILE), "ssl_cert_file", or "ca_file" (the provider's tls.ca_file
    does it; the environment's bundles are the system's)."""
    isolate(monkeypatch, tmp)
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    if trust == "requests":
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(pki.ca))
    elif trust == "ssl_cert_file":
        monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))
    else:
        monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/etc/ssl/certs/ca-certificates.crt")
    monkeypatch.setenv("AZURE_AUTHORITY_HOST", entra.base_url)
    monkeypatch.setenv("AZURE_TENANT_ID", TENANT)
    monkeypatch.setenv("AZURE_CLIENT_ID", CLIENT_ID)
    if secret:
        monkeypatch.setenv("AZURE_CLIENT_SECRET", CLIENT_SECRET)
    else:
        token = tmp / "azure-identity-token"
        token.write_text(FEDERATED_TOKEN)
        monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", str(token))


def config(azure: BearerAzure, keys: str, tls: str = "") -> str:
    return f"""
store: {{url: "memory://"}}
auth: {{master_key: mk-test}}
routing: {{circuit_open_s: 30}}
providers:
  - name: az
    kind: azure
    base_url: {azure.base_url}
    api_version: "2024-10-21"
    keys: {keys}
    timeouts: {{first_byte_s: 5, idle_s: 5, total_s: 10}}{tls}
"""


def tls(pki: Pki) -> str:
    return f'\n    tls: {{ca_file: "{pki.ca}"}}'


@pytest.fixture
async def serve() -> AsyncIterator[object]:
    servers: list[TestServer] = []

    async def start(text: str) -> TestServer:
        server = TestServer(build_app(parse_config(text, env={})), host="127.0.0.1")
        await server.start_server()
        servers.append(server)
        return server

    yield start
    for server in servers:
        await server.close()


async def chat_both_ways(client: openai.AsyncOpenAI) -> None:
    answer = await client.chat.completions.create(model="az/text", messages=CHAT)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == TEXT
    stream = await client.chat.completions.create(
        model="az/text",
        messages=CHAT,  # type: ignore[arg-type]
        stream=True,
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == TEXT


@pytest.mark.parametrize("trust", ["requests", "ssl_cert_file", "ca_file"])
async def test_workload_identity_token_serves_chat_and_embeddings_on_one_fetch(
    trust: str,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pki: Pki,
    entra: FakeEntra,
    azure: BearerAzure,
    serve: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    entra_env(monkeypatch, tmp_path, entra, pki, trust=trust)
    extra = tls(pki) if trust == "ca_file" else ""
    server = await serve(config(azure, "[{identity: default, name: aks}]", extra))  # type: ignore[operator]
    base = str(server.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base, api_key="mk-test", max_retries=0) as client:
        await chat_both_ways(client)
        await chat_both_ways(client)
        vectors = await client.embeddings.create(model="az/embed", input="one two three")
        assert vectors.data[0].embedding == [0.125, 0.25, 0.5]
    # one federated token exchange, as AAD's token endpoint is asked for it
    assert entra.token_posts == 1
    form = entra.forms[0]
    assert form["grant_type"] == "client_credentials"
    assert form["client_assertion_type"] == JWT_BEARER
    assert form["client_assertion"] == FEDERATED_TOKEN
    assert form["client_id"] == CLIENT_ID
    assert form["scope"] == SCOPE
    assert "client_secret" not in form
    [token] = entra.issued
    assert entra.issued[token].grant == "assertion"
    # every request carried that token and nothing else (no api-key beside it)
    assert azure.bearers == [token] * 5
    assert azure.refused == []
    assert all("api-key" not in c.headers or c.headers["api-key"] == azure.key for c in azure.calls)
    assert FEDERATED_TOKEN not in caplog.text
    assert token not in caplog.text


async def test_a_client_secret_token_serves_chat(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pki: Pki,
    entra: FakeEntra,
    azure: BearerAzure,
    serve: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    entra_env(monkeypatch, tmp_path, entra, pki, secret=True)
    server = await serve(config(azure, "[{identity: default}]"))  # type: ignore[operator]
    base = str(server.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base, api_key="mk-test", max_retries=0) as client:
        await chat_both_ways(client)
    assert entra.token_posts == 1
    form = entra.forms[0]
    assert form["grant_type"] == "client_credentials"
    assert form["client_secret"] == CLIENT_SECRET
    assert form["client_id"] == CLIENT_ID
    assert form["scope"] == SCOPE
    assert "client_assertion" not in form
    [token] = entra.issued
    assert entra.issued[token].grant == "secret"
    assert azure.bearers == [token] * 2
    assert CLIENT_SECRET not in caplog.text
    assert token not in caplog.text


@pytest.fixture
def short_entra(pki: Pki) -> Iterator[FakeEntra]:
    fake = FakeEntra(pki, life_s=4).start()
    yield fake
    fake.stop()


async def test_a_short_lived_token_is_refreshed_before_it_expires_under_load(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pki: Pki,
    short_entra: FakeEntra,
    serve: object,
) -> None:
    entra_env(monkeypatch, tmp_path, short_entra, pki)
    azure = BearerAzure(short_entra).start()
    try:
        server = await serve(config(azure, "[{identity: default}]"))  # type: ignore[operator]
        base = str(server.make_url("/v1"))
        failures: list[str] = []
        done = 0
        end = time.monotonic() + 8  # two token lives

        async def worker(client: openai.AsyncOpenAI) -> None:
            nonlocal done
            while time.monotonic() < end:
                try:
                    answer = await client.chat.completions.create(model="az/text", messages=CHAT)  # type: ignore[arg-type]
                    assert answer.choices[0].message.content == TEXT
                    done += 1
                except Exception as error:  # every failure is counted, none expected
                    failures.append(repr(error))
                await asyncio.sleep(0.05)

        async with openai.AsyncOpenAI(base_url=base, api_key="mk-test", max_retries=0) as client:
            await asyncio.gather(*(worker(client) for _ in range(4)))
    finally:
        azure.stop()
    assert failures == []
    assert azure.refused == []  # the fake 401s an expired token: none was sent
    assert done > 50
    # refreshed about halfway through each 4 s life: a few fetches, not one per request
    assert 3 <= short_entra.token_posts <= 10
    assert len(set(azure.bearers)) == short_entra.token_posts


async def test_an_authority_that_is_down_fails_over_to_a_static_key(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pki: Pki,
    entra: FakeEntra,
    azure: BearerAzure,
    serve: object,
) -> None:
    entra_env(monkeypatch, tmp_path, entra, pki)
    entra.stop()
    keys = f"[{{identity: default, name: aks, weight: 1000}}, {{name: static, key: {azure.key}}}]"
    server = await serve(config(azure, keys))  # type: ignore[operator]
    base = str(server.make_url("/v1"))
    started = time.monotonic()
    async with openai.AsyncOpenAI(base_url=base, api_key="mk-test", max_retries=0) as client:
        for _ in range(5):
            answer = await client.chat.completions.create(model="az/text", messages=CHAT)  # type: ignore[arg-type]
            assert answer.choices[0].message.content == TEXT
    assert time.monotonic() - started < 4  # no library retries on the refused connection
    assert azure.bearers == [None] * 5  # all on the static api-key
    async with aiohttp.ClientSession() as session:
        health = await (await session.get(server.make_url("/admin/health"), headers=HEADERS)).json()
    text = str(health)
    assert "aks" in text
    assert "circuit_open" in text


async def test_with_no_other_key_the_client_gets_a_502_naming_the_identity(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pki: Pki,
    entra: FakeEntra,
    azure: BearerAzure,
    serve: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    entra_env(monkeypatch, tmp_path, entra, pki, secret=True)
    entra.refuse = True
    server = await serve(config(azure, "[{identity: default}]"))  # type: ignore[operator]
    async with aiohttp.ClientSession() as session:
        first = await session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": "az/text", "messages": CHAT},
            headers=HEADERS,
        )
        body = await first.json()
        assert first.status == 502, body
        error = body["error"]
        assert error["code"] == "credentials_unavailable"
        assert "Microsoft Entra ID" in error["message"]
        assert "AADSTS7000215" in error["message"]
        assert CLIENT_SECRET not in str(body)
        assert CLIENT_SECRET.split("~")[1][:12] not in str(body)
        calls = entra.token_posts
        # the key's circuit is open now: refused without asking the authority again
        second = await session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": "az/text", "messages": CHAT},
            headers=HEADERS,
        )
        assert second.status == 503
        assert entra.token_posts == calls
    assert entra.forms  # the secret was sent, and refused
    assert entra.forms[0]["client_secret"] == CLIENT_SECRET
    assert azure.calls == []
    assert CLIENT_SECRET not in caplog.text


def test_gateway_process_with_openai_python(
    tmp_path: Path, pki: Pki, entra: FakeEntra, azure: BearerAzure
) -> None:
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text(FEDERATED_TOKEN)
    env = {k: v for k, v in isolated_env(tmp_path).items() if k != "SSL_CERT_FILE"}
    env.update(
        AZURE_AUTHORITY_HOST=entra.base_url,
        AZURE_TENANT_ID=TENANT,
        AZURE_CLIENT_ID=CLIENT_ID,
        AZURE_FEDERATED_TOKEN_FILE=str(token_file),
        REQUESTS_CA_BUNDLE=str(pki.ca),
        PYTHONUNBUFFERED="1",
        PATH=os.environ.get("PATH", ""),
    )
    path = tmp_path / "gateway.yaml"
    path.write_text(config(azure, "[{identity: default}]") + "logging: {level: debug}\n")
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(path), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="mk-test", max_retries=0, timeout=20
        ) as client:
            with client.chat.completions.stream(model="az/text", messages=CHAT) as stream:  # type: ignore[arg-type]
                final = stream.get_final_completion()
            assert final.choices[0].message.content == TEXT
    finally:
        proc.terminate()
        proc.wait(30)
    [token] = entra.issued
    assert azure.bearers == [token]
    assert entra.forms[0]["client_assertion"] == FEDERATED_TOKEN
    logged = log.read_text()
    assert FEDERATED_TOKEN not in logged
    assert token not in logged
