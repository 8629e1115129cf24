"""A gateway with distinctive secrets of every kind is driven through every route, on the
paths that succeed and those that fail (upstreams that quote the key back in their error
bodies and headers, bad keys, admin calls with the wrong key, an unhandled exception inside
a request, a crash at startup); then everything the gateway wrote is scanned: its stdout
and stderr, /metrics, every response body and header, the admin answers. No secret may
appear, except a created virtual key in its own creation answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import free_port
from tests.e2e.conftest import stop_gateway
from tests.e2e.conftest import wait_healthy
from tests.redis_server import RedisServer
from tests.security.recorder import ACCESS_TOKEN
from tests.security.recorder import Recorder
from tests.upstreams.openai_upstream import FakeOpenAI
from tests.vertex_credentials import service_account_file

pytestmark = pytest.mark.e2e

MASTER = "sk-master-SECRET-a81f07"
STATIC = "sk-static-SECRET-ccdd19"
REDIS_PASSWORD = "redis-pass-SECRET-eeff42"
PROVIDER_SECRETS = {
    "openai_ok": "sk-openai-SECRET-11aa53",
    "openai_echo": "sk-echo-SECRET-22bb64",
    "anthropic": "sk-ant-SECRET-33cc75",
    "azure": "az-SECRET-44dd86",
    "gemini": "ge-SECRET-55ee97",
    "bedrock_key": "bedrock-apikey-SECRET-99ab08",
    "aws_id": "AKIASECRET66FF19",
    "aws_secret": "bedrock-secret-SECRET-77ab2a",
    "aws_session": "bedrock-session-SECRET-88ab3b",
    "ollama": "ollama-SECRET-0abc4c",
}
VERTEX_KEY_ID = "vertex-pkid-SECRET-aabb5d"
ECHOING = ["oa_echo", "an", "az", "ge", "vx", "bd_key", "bd_sig", "ol"]


def config(fake: FakeOpenAI, rec: str, redis: RedisServer, credentials: Path) -> str:
    s = PROVIDER_SECRETS
    fast = "timeouts: {first_byte_s: 5}"
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: "{redis.url()}"}}
routing: {{max_attempts: 2, auth_hold_s: 0.01, cooldown_s: 0.01, circuit_failures: 1000}}
providers:
  - {{name: oa_ok, kind: openai, base_url: "{fake.base_url}", keys: [{{key: {s["openai_ok"]}}}]}}
  - {{name: oa_echo, kind: openai, base_url: "{rec}/v1", keys: [{{key: {s["openai_echo"]}}}]}}
  - {{name: an, kind: anthropic, base_url: "{rec}", keys: [{{key: {s["anthropic"]}}}], {fast}}}
  - {{name: az, kind: azure, base_url: "{rec}", api_version: "2024-10-21",
      keys: [{{key: {s["azure"]}}}]}}
  - {{name: ge, kind: gemini, base_url: "{rec}", keys: [{{key: {s["gemini"]}}}]}}
  - {{name: vx, kind: vertex, base_url: "{rec}", region: us-central1, project: p1,
      keys: [{{credentials_file: "{credentials}"}}]}}
  - {{name: bd_key, kind: bedrock, base_url: "{rec}", region: us-east-1,
      keys: [{{key: {s["bedrock_key"]}}}]}}
  - {{name: bd_sig, kind: bedrock, base_url: "{rec}", region: us-east-1,
      keys: [{{aws_access_key_id: {s["aws_id"]}, aws_secret_access_key: {s["aws_secret"]},
               aws_session_token: {s["aws_session"]}}}]}}
  - {{name: ol, kind: ollama, base_url: "{rec}", keys: [{{key: {s["ollama"]}}}]}}
  - {{name: mock, kind: mock}}
models:
  - name: priced
    targets: [{{provider: oa_ok, model: text}}]
    price: {{input_per_mtok: 2, output_per_mtok: 8}}
  - name: echo-then-ok
    targets:
      - {{provider: oa_echo, model: echo-401, priority: 0}}
      - {{provider: oa_ok, model: text, priority: 1}}
keys:
  - {{name: static, key: {STATIC}, models: [priced, mock/mock]}}
"""


def vertex_credentials(folder: Path, token_uri: str) -> tuple[Path, str]:
    """A service-account file with a distinctive key id; the private key's base64 lines."""
    path = service_account_file(folder, token_uri)
    data = json.loads(path.read_text())
    data["private_key_id"] = VERTEX_KEY_ID
    path.write_text(json.dumps(data))
    lines = [ln for ln in data["private_key"].splitlines() if ln and "-----" not in ln]
    return path, lines[len(lines) // 2]


def launch(config_text: str, tmp: Path, mode: str, text: str) -> Gateway:
    (tmp / "gateway.yaml").write_text(config_text)
    port = free_port()
    log = tmp / f"gateway-{mode or 'plain'}.log"
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "GW_CRASH": mode, "GW_CRASH_TEXT": text}
    args = [sys.executable, str(Path(__file__).with_name("launcher.py")), "serve"]
    args += ["--config", str(tmp / "gateway.yaml"), "--host", "127.0.0.1", "--port", str(port)]
    with log.open("wb") as out:
        proc = subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=tmp)
    return Gateway(f"http://127.0.0.1:{port}", proc, log)


class Transcript:
    """Everything the gateway answered: status lines, headers and bodies, as text."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.created: str = ""  # the creation answer of the virtual key, kept apart

    async def call(
        self,
        session: aiohttp.ClientSession,
        method: str,
        url: str,
        key: str | None,
        body: Any = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, bytes]:
        sent = dict(headers or {})
        if key is not None:
            sent["Authorization"] = f"Bearer {key}"
        async with session.request(method, url, json=body, headers=sent) as response:
            data = await response.read()
            self.parts.append(f"{response.status} {dict(response.headers)}\n")
            self.parts.append(data.decode("utf-8", "replace"))
            return response.status, data

    def text(self) -> str:
        return "".join(self.parts)


@pytest.fixture(scope="module")
def rig(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, Path, list[str], FakeOpenAI]]:
    redis = RedisServer(password=REDIS_PASSWORD).start()
    fake = FakeOpenAI().start()
    recorder = Recorder().start()
    folder = tmp_path_factory.mktemp("gw-secrets")
    credentials, pem_line = vertex_credentials(folder, f"{recorder.base_url}/token")
    secrets = [MASTER, STATIC, REDIS_PASSWORD, VERTEX_KEY_ID, pem_line, ACCESS_TOKEN]
    secrets += PROVIDER_SECRETS.values()
    try:
        yield config(fake, recorder.base_url, redis, credentials), folder, secrets, fake
    finally:
        recorder.stop()
        fake.stop()
        redis.close()


def chat(model: str, stream: bool = False, **extra: Any) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    return {**body, **extra}


async def drive(gw: Gateway, t: Transcript) -> tuple[str, str]:
    """Every route, succeeding and failing; the created key's secret and id."""
    v1, timeout = gw.url + "/v1", aiohttp.ClientTimeout(total=30)
    async with aiohttp.ClientSession(timeout=timeout) as s:
        status, data = await t.call(s, "POST", gw.url + "/admin/keys", MASTER, {"name": "made"})
        assert status == 201
        t.created = t.parts.pop() + t.parts.pop()  # the one answer allowed to show it
        made = json.loads(data)
        created, key_id = made["key"], made["id"]
        for key in (MASTER, STATIC, created):
            assert (await t.call(s, "POST", v1 + "/chat/completions", key, chat("priced")))[
                0
            ] == 200
            await t.call(s, "POST", v1 + "/chat/completions", key, chat("priced", True))
            await t.call(s, "GET", v1 + "/models", key)
        await t.call(s, "POST", v1 + "/chat/completions", MASTER, chat("echo-then-ok"))
        for provider in ECHOING:
            for status_code in ("400", "500", "401"):  # a 401 benches the key: last
                for stream in (False, True):
                    body = chat(f"{provider}/echo-{status_code}", stream, max_tokens=8)
                    await t.call(s, "POST", v1 + "/chat/completions", MASTER, body)
        messages = {
            "model": "an/echo-401",
            "max_tokens": 8,
            "messages": [{"role": "user", "content": "x"}],
        }
        await t.call(s, "POST", v1 + "/messages", None, messages, {"x-api-key": MASTER})
        await t.call(s, "POST", v1 + "/messages/count_tokens", MASTER, messages)
        await t.call(s, "POST", v1 + "/responses", created, {"model": "priced", "input": "hi"})
        await t.call(
            s, "POST", v1 + "/responses", MASTER, {"model": "oa_echo/echo-401", "input": "hi"}
        )
        await t.call(s, "POST", v1 + "/embeddings", MASTER, {"model": "mock/mock", "input": "x"})
        # failures of the client's own making
        await t.call(s, "POST", v1 + "/chat/completions", "sk-wrong-key", chat("priced"))
        await t.call(s, "POST", v1 + "/chat/completions", None, chat("priced"))
        await t.call(s, "POST", v1 + "/chat/completions", STATIC, chat("oa_echo/echo-401"))
        await t.call(s, "POST", v1 + "/chat/completions", MASTER, {"model": 5})
        await t.call(s, "POST", v1 + "/chat/completions", "crash-request", chat("priced"))
        await t.call(s, "GET", gw.url + "/nowhere", MASTER)
        for key in (STATIC, created, "sk-wrong-key"):
            await t.call(s, "GET", gw.url + "/admin/keys", key)
            await t.call(s, "DELETE", gw.url + f"/admin/keys/{key_id}", key)
        # what an operator reads
        for path in (
            "/admin/keys",
            f"/admin/keys/{key_id}",
            "/admin/keys/cfg-static",
            "/admin/spend",
            "/admin/health",
        ):
            assert (await t.call(s, "GET", gw.url + path, MASTER))[0] == 200
        await t.call(s, "DELETE", gw.url + f"/admin/keys/{key_id}", MASTER)
        await t.call(s, "POST", v1 + "/chat/completions", created, chat("priced"))
        for path in ("/healthz", "/readyz", "/metrics"):
            await t.call(s, "GET", gw.url + path, None)
    return created, key_id


def found(secrets: list[str], text: str) -> list[str]:
    return [secret for secret in secrets if secret in text]


async def test_no_secret_in_anything_the_gateway_wrote(
    rig: tuple[str, Path, list[str], FakeOpenAI], capsys: pytest.CaptureFixture[str]
) -> None:
    config_text, folder, secrets, fake = rig
    # what the injected failures quote: every secret of the config, as a library's message
    # quoting a credential it was handed would (the redaction of log lines knows these)
    text = " ".join([MASTER, STATIC, REDIS_PASSWORD, *PROVIDER_SECRETS.values()])
    gw = launch(config_text, folder, "request", text)
    try:
        wait_healthy(gw.url, gw.proc)
        transcript = Transcript()
        created, _ = await drive(gw, transcript)
    finally:
        stop_gateway(gw)
    crashed = launch(config_text, folder, "start", text)
    assert crashed.proc.wait(30) != 0
    hashes = [hashlib.sha256(k.encode()).hexdigest() for k in (created, STATIC)]
    everything = {
        "responses": transcript.text(),
        "log": gw.log.read_text(errors="replace"),
        "crash": crashed.log.read_text(errors="replace"),
    }
    leaks = {
        where: found([*secrets, created, *hashes], written) for where, written in everything.items()
    }
    leaks = {where: hit for where, hit in leaks.items() if hit}
    count = sum(len(hit) for hit in leaks.values())
    scanned = sum(len(w) for w in everything.values())
    with capsys.disabled():
        print(
            f"\nsecrets: found={count} scanned_bytes={scanned} secrets_checked={len(secrets) + 3}"
        )
    assert count == 0, leaks
    # the scan saw what it had to see: the injected failures and the upstreams' echoes
    assert created in transcript.created
    assert "injected failure quoting" in everything["log"]
    assert "injected startup failure quoting" in everything["crash"]
    assert "Incorrect API key provided: " in everything["responses"]
    assert "[redacted]" in everything["responses"]
    assert "uncaught exception" in everything["crash"]
    assert (
        "gateway_requests_total" in everything["responses"] or "# TYPE" in everything["responses"]
    )
    assert any(
        r.headers.get("Authorization") == f"Bearer {PROVIDER_SECRETS['openai_ok']}"
        for r in fake.requests
    )
