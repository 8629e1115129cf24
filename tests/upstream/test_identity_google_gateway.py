"""Vertex AI and Gemini `identity: default` keys through a real gateway, with google-auth's
own code against loopback fakes of Google's token endpoints
(tests/identity_endpoints/google.py): the metadata server of GKE Workload Identity (and
GCE, Cloud Run), impersonation through the IAM Credentials API at a configured
`iam_endpoint`, and workload identity federation from a file (STS token exchange, then
impersonation). The upstream accepts only a live token those fakes issued. Chat (unary and
streamed) and embeddings on one token, a short-lived token refreshed before expiry under
load, failover to a static API key when the identity gives nothing, a 502 naming the
identity (no token) when no key is left, and one `gateway serve` process with
openai-python.

google-auth reads GCE_METADATA_HOST once, when it is first imported; the in-process tests
set that module value as the variable would have (`_metadata._GCE_METADATA_HOST`), and the
process test sets the variable itself."""

from __future__ import annotations

import asyncio
import json
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
from google.auth.compute_engine import _metadata

from gateway.app import build_app
from gateway.config import parse_config
from tests.e2e.conftest import free_port
from tests.e2e.conftest import wait_healthy
from tests.identity_endpoints.google import AUDIENCE
from tests.identity_endpoints.google import CLOUD_PLATFORM
from tests.identity_endpoints.google import JWT_TOKEN_TYPE
from tests.identity_endpoints.google import NODE_ACCOUNT
from tests.identity_endpoints.google import SUBJECT_TOKEN
from tests.identity_endpoints.google import TARGET_ACCOUNT
from tests.identity_endpoints.google import BearerGemini
from tests.identity_endpoints.google import FakeGoogleIdentity
from tests.identity_endpoints.isolation import closed_port
from tests.identity_endpoints.isolation import isolate
from tests.identity_endpoints.isolation import isolated_env
from tests.upstreams.gemini_upstream import TEXT_PIECES

CHAT = [{"role": "user", "content": "hi"}]
TEXT = "".join(TEXT_PIECES)
HEADERS = {"authorization": "Bearer mk-test"}
ACCOUNTS_PATH = "/computeMetadata/v1/instance/service-accounts/"
TOKEN_PATH = ACCOUNTS_PATH + "default/token"


@pytest.fixture
def google() -> Iterator[FakeGoogleIdentity]:
    fake = FakeGoogleIdentity().start()
    yield fake
    fake.stop()


@pytest.fixture
def upstream(google: FakeGoogleIdentity) -> Iterator[BearerGemini]:
    fake = BearerGemini(google).start()
    yield fake
    fake.stop()


def google_env(
    monkeypatch: pytest.MonkeyPatch, tmp: Path, google: FakeGoogleIdentity | None
) -> None:
    """A pod's environment: the metadata server at `google` (None: at a closed port)."""
    isolate(monkeypatch, tmp)
    if google is not None:
        monkeypatch.setenv("GCE_METADATA_HOST", google.host)
        monkeypatch.setenv("GCE_METADATA_IP", google.host)
    monkeypatch.setattr(_metadata, "_GCE_METADATA_HOST", os.environ["GCE_METADATA_HOST"])


def config(upstream: BearerGemini, vertex_keys: str, gemini_keys: str | None = None) -> str:
    gemini = gemini_keys or vertex_keys
    return f"""
store: {{url: "memory://"}}
auth: {{master_key: mk-test}}
routing: {{circuit_open_s: 30}}
providers:
  - name: vx
    kind: vertex
    base_url: {upstream.base_url}
    project: test-project
    region: europe-west4
    keys: {vertex_keys}
    timeouts: {{first_byte_s: 5, idle_s: 5, total_s: 10}}
  - name: gm
    kind: gemini
    base_url: {upstream.base_url}
    keys: {gemini}
    timeouts: {{first_byte_s: 5, idle_s: 5, total_s: 10}}
"""


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


async def chat_both_ways(client: openai.AsyncOpenAI, model: str) -> None:
    answer = await client.chat.completions.create(model=model, messages=CHAT)  # type: ignore[arg-type]
    assert answer.choices[0].message.content == TEXT
    stream = await client.chat.completions.create(
        model=model,
        messages=CHAT,  # type: ignore[arg-type]
        stream=True,
    )
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == TEXT


def client_of(server: TestServer) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=str(server.make_url("/v1")), api_key="mk-test", max_retries=0
    )


async def test_workload_identity_serves_vertex_and_gemini_chat_and_embeddings_on_one_token(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    google: FakeGoogleIdentity,
    upstream: BearerGemini,
    serve: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    google_env(monkeypatch, tmp_path, google)
    server = await serve(config(upstream, "[{identity: default, name: gke}]"))  # type: ignore[operator]
    async with client_of(server) as client:
        await chat_both_ways(client, "vx/text")
        await chat_both_ways(client, "gm/text")
        for model in ("vx/text-embedding-005", "gm/gemini-embedding-001"):
            vectors = await client.embeddings.create(model=model, input="one two")
            assert vectors.data[0].embedding == [0.5, 0.25]
    # one metadata token for both providers: the same identity, one cache entry
    [token] = google.issued
    assert google.issued[token].how == "metadata"
    assert google.issued[token].principal == NODE_ACCOUNT
    token_calls = [c for c in google.calls if c.startswith("GET " + TOKEN_PATH)]
    assert len(token_calls) == 1
    assert "scopes=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fcloud-platform" in token_calls[0]
    assert upstream.bearers == [token] * 6
    assert upstream.refused == []
    assert all("x-goog-api-key" not in {k.lower() for k in r.headers} for r in upstream.requests)
    assert token not in caplog.text


async def test_impersonation_at_a_configured_iam_endpoint(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    google: FakeGoogleIdentity,
    upstream: BearerGemini,
    serve: object,
) -> None:
    google_env(monkeypatch, tmp_path, google)
    key = (
        f"[{{identity: default, impersonate: {TARGET_ACCOUNT}, iam_endpoint: '{google.base_url}'}}]"
    )
    server = await serve(config(upstream, key))  # type: ignore[operator]
    async with client_of(server) as client:
        await chat_both_ways(client, "vx/text")
        vectors = await client.embeddings.create(model="vx/text-embedding-005", input="x")
        assert vectors.data[0].embedding == [0.5, 0.25]
    by_how = {issued.how: token for token, issued in google.issued.items()}
    assert sorted(by_how) == ["iam", "metadata"]  # the node's token, exchanged once
    assert google.issued[by_how["iam"]].principal == TARGET_ACCOUNT
    [asked] = google.iam_bodies
    assert asked["scope"] == [CLOUD_PLATFORM]
    assert asked["lifetime"] == "3600s"
    assert upstream.bearers == [by_how["iam"]] * 3  # never the node's own token


async def test_workload_identity_federation_from_a_file_reaches_only_sts_and_iam(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    google: FakeGoogleIdentity,
    upstream: BearerGemini,
    serve: object,
) -> None:
    google_env(monkeypatch, tmp_path, None)  # not on Google Cloud: no metadata server
    subject = tmp_path / "oidc-token"
    subject.write_text(SUBJECT_TOKEN)
    credentials = tmp_path / "wif.json"
    credentials.write_text(
        json.dumps(
            {
                "type": "external_account",
                "audience": AUDIENCE,
                "subject_token_type": JWT_TOKEN_TYPE,
                "token_url": google.base_url + "/v1/token",
                "credential_source": {"file": str(subject)},
                "service_account_impersonation_url": (
                    f"{google.base_url}/v1/projects/-/serviceAccounts/{TARGET_ACCOUNT}"
                    ":generateAccessToken"
                ),
            }
        )
    )
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(credentials))
    # anything but the fakes (Cloud Resource Manager, say) would meet a proxy that is down
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{closed_port()}")
    server = await serve(config(upstream, "[{identity: default}]"))  # type: ignore[operator]
    async with client_of(server) as client:
        await chat_both_ways(client, "vx/text")
    [form] = google.forms
    assert form["subject_token"] == SUBJECT_TOKEN
    assert form["audience"] == AUDIENCE
    # the federated token only asks IAM for the service account's, which has the scope
    assert form["scope"] == "https://www.googleapis.com/auth/iam"
    [asked] = google.iam_bodies
    assert asked["scope"] == [CLOUD_PLATFORM]
    assert [c.split("?")[0] for c in google.calls] == [
        "POST /v1/token",
        f"POST /v1/projects/-/serviceAccounts/{TARGET_ACCOUNT}:generateAccessToken",
    ]
    [iam] = [t for t, issued in google.issued.items() if issued.how == "iam"]
    assert upstream.bearers == [iam] * 2


@pytest.fixture
def short_google() -> Iterator[FakeGoogleIdentity]:
    fake = FakeGoogleIdentity(life_s=4).start()
    yield fake
    fake.stop()


async def test_a_short_lived_token_is_refreshed_before_it_expires_under_load(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    short_google: FakeGoogleIdentity,
    serve: object,
) -> None:
    google_env(monkeypatch, tmp_path, short_google)
    upstream = BearerGemini(short_google).start()
    try:
        server = await serve(config(upstream, "[{identity: default}]"))  # type: ignore[operator]
        failures: list[str] = []
        done = 0
        end = time.monotonic() + 8  # two token lives

        async def worker(client: openai.AsyncOpenAI) -> None:
            nonlocal done
            while time.monotonic() < end:
                try:
                    answer = await client.chat.completions.create(model="vx/text", messages=CHAT)  # type: ignore[arg-type]
                    assert answer.choices[0].message.content == TEXT
                    done += 1
                except Exception as error:  # every failure is counted, none expected
                    failures.append(repr(error))
                await asyncio.sleep(0.05)

        async with client_of(server) as client:
            await asyncio.gather(*(worker(client) for _ in range(4)))
    finally:
        upstream.stop()
    assert failures == []
    assert upstream.refused == []  # the fake 401s an expired token: none was sent
    assert done > 50
    fetches = len(short_google.issued)
    assert 3 <= fetches <= 10  # refreshed before each 4 s life ends, not once per request
    assert len(set(upstream.bearers)) == fetches


async def test_an_identity_that_gives_nothing_fails_over_to_a_static_api_key(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    google: FakeGoogleIdentity,
    upstream: BearerGemini,
    serve: object,
) -> None:
    google_env(monkeypatch, tmp_path, google)
    google.refuse = True  # the metadata server has no token for this pod (404)
    static = f"{{name: static, key: {upstream.api_key}}}"
    keys = f"[{{identity: default, name: gke, weight: 1000}}, {static}]"
    server = await serve(config(upstream, "[{identity: default}]", keys))  # type: ignore[operator]
    started = time.monotonic()
    async with client_of(server) as client:
        for _ in range(5):
            answer = await client.chat.completions.create(model="gm/text", messages=CHAT)  # type: ignore[arg-type]
            assert answer.choices[0].message.content == TEXT
    assert time.monotonic() - started < 4
    assert upstream.bearers == [None] * 5  # all on the static key
    # the identity's one try (google-auth asks for the account's info before its token, and
    # the 404 ends it there), not one per request
    tries = [c for c in google.calls if ACCOUNTS_PATH in c]
    assert 1 <= len(tries) <= 2, google.calls
    async with aiohttp.ClientSession() as session:
        health = await (await session.get(server.make_url("/admin/health"), headers=HEADERS)).json()
    text = str(health)
    assert "gke" in text
    assert "circuit_open" in text


async def test_with_no_other_key_the_client_gets_a_502_naming_the_identity(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    google: FakeGoogleIdentity,
    upstream: BearerGemini,
    serve: object,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    google_env(monkeypatch, tmp_path, google)
    stranger = "other@test-project.iam.gserviceaccount.com"  # not granted to the node's account
    key = f"[{{identity: default, impersonate: {stranger}, iam_endpoint: '{google.base_url}'}}]"
    server = await serve(config(upstream, key))  # type: ignore[operator]
    async with aiohttp.ClientSession() as session:
        first = await session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": "vx/text", "messages": CHAT},
            headers=HEADERS,
        )
        body = await first.json()
        assert first.status == 502, body
        error = body["error"]
        assert error["code"] == "credentials_unavailable"
        assert (
            f"Google Application Default Credentials impersonating {stranger}" in error["message"]
        )
        assert "iam.serviceAccounts.getAccessToken" in error["message"]
        calls = len(google.iam_bodies)
        second = await session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": "vx/text", "messages": CHAT},
            headers=HEADERS,
        )
        assert second.status == 503  # the key's circuit is open: IAM is not asked again
        assert len(google.iam_bodies) == calls
    [node_token] = google.issued  # the metadata token that was sent to IAM, and refused
    assert node_token not in str(body)
    assert node_token not in caplog.text
    assert upstream.requests == []


def test_gateway_process_with_openai_python(
    tmp_path: Path, google: FakeGoogleIdentity, upstream: BearerGemini
) -> None:
    env = isolated_env(tmp_path)
    env.update(
        GCE_METADATA_HOST=google.host,
        GCE_METADATA_IP=google.host,
        PYTHONUNBUFFERED="1",
        PATH=os.environ.get("PATH", ""),
    )
    path = tmp_path / "gateway.yaml"
    path.write_text(config(upstream, "[{identity: default}]") + "logging: {level: debug}\n")
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
            with client.chat.completions.stream(model="vx/text", messages=CHAT) as stream:  # type: ignore[arg-type]
                final = stream.get_final_completion()
            assert final.choices[0].message.content == TEXT
    finally:
        proc.terminate()
        proc.wait(30)
    [token] = google.issued
    assert upstream.bearers == [token]
    assert token not in log.read_text()
