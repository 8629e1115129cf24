"""Bedrock `identity: default` keys through a real gateway: chat (streamed and not),
embeddings and count_tokens signed with the credentials a fake STS issued to the web
identity (the fake Bedrock checks each signature with the issued secret and session token),
failover to a static key when the identity's STS is down, and a clear 502 naming the
identity (no token in it) when no key is left. In-process (aiohttp's TestServer, the
AsyncOpenAI client), and once as a `gateway serve` process with openai-python."""

from __future__ import annotations

import os
import subprocess
import sys
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
from tests.identity_endpoints.aws import BASE_KEY
from tests.identity_endpoints.aws import WEB_IDENTITY_TOKEN
from tests.identity_endpoints.aws import FakeAws
from tests.identity_endpoints.isolation import closed_port
from tests.identity_endpoints.isolation import isolate
from tests.identity_endpoints.isolation import isolated_env
from tests.identity_endpoints.signed_bedrock import SignedBedrock

ROLE_ARN = "arn:aws:iam::123456789012:role/llm-gateway"
CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture
def aws() -> Iterator[FakeAws]:
    fake = FakeAws().start()
    yield fake
    fake.stop()


@pytest.fixture
def bedrock(aws: FakeAws) -> Iterator[SignedBedrock]:
    fake = SignedBedrock(aws).start()
    yield fake
    fake.stop()


def irsa_env(env: dict[str, str], tmp: Path, sts_url: str) -> dict[str, str]:
    token = tmp / "token"
    token.write_text(WEB_IDENTITY_TOKEN)
    return {
        **env,
        "AWS_WEB_IDENTITY_TOKEN_FILE": str(token),
        "AWS_ROLE_ARN": ROLE_ARN,
        "AWS_ENDPOINT_URL_STS": sts_url,
    }


def config(bedrock: SignedBedrock, keys: str) -> str:
    return f"""
store: {{url: "memory://"}}
auth: {{master_key: mk-test}}
routing: {{circuit_open_s: 30}}
providers:
  - name: br
    kind: bedrock
    region: us-east-1
    base_url: {bedrock.base_url}
    keys: {keys}
    timeouts: {{first_byte_s: 5, idle_s: 5, total_s: 10}}
models:
  - name: embed
    targets: [{{provider: br, model: amazon.titan-embed-text-v2:0}}]
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


async def test_chat_embeddings_and_count_tokens_are_signed_with_the_issued_credentials(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    aws: FakeAws,
    bedrock: SignedBedrock,
    serve: object,
) -> None:
    env = irsa_env(isolate(monkeypatch, tmp_path), tmp_path, aws.base_url)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    server = await serve(config(bedrock, "[{identity: default, name: irsa}]"))  # type: ignore[operator]
    base = str(server.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base, api_key="mk-test", max_retries=0) as client:
        answer = await client.chat.completions.create(model="br/text", messages=CHAT)  # type: ignore[arg-type]
        assert answer.choices[0].message.content == "Let me check that."
        stream = await client.chat.completions.create(
            model="br/text",
            messages=CHAT,  # type: ignore[arg-type]
            stream=True,
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert text == "Let me check that."
        vectors = await client.embeddings.create(model="embed", input="one two three")
        assert vectors.data[0].embedding == [0.25, 0.5, 0.75]
    async with aiohttp.ClientSession() as session:
        counted = await session.post(
            server.make_url("/v1/messages/count_tokens"),
            json={"model": "br/text", "messages": CHAT},
            headers={"authorization": "Bearer mk-test"},
        )
        assert counted.status == 200, await counted.text()
        assert await counted.json() == {"input_tokens": 7}
    # one web identity exchange served all four requests, and each carried its credentials
    assert aws.count("AssumeRoleWithWebIdentity") == 1
    issued = next(k for k in aws.issued if k.startswith("ASIA"))
    assert bedrock.signers == [issued] * 4
    assert all(r.headers["x-amz-security-token"] == aws.issued[issued][1] for r in bedrock.requests)


async def test_an_identity_that_is_down_fails_over_to_a_static_key(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    aws: FakeAws,
    bedrock: SignedBedrock,
    serve: object,
) -> None:
    env = irsa_env(isolate(monkeypatch, tmp_path), tmp_path, f"http://127.0.0.1:{closed_port()}")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    keys = (
        "[{identity: default, name: irsa, weight: 1000},"
        f" {{name: static, aws_access_key_id: {BASE_KEY[0]},"
        f" aws_secret_access_key: '{BASE_KEY[1]}'}}]"
    )
    server = await serve(config(bedrock, keys))  # type: ignore[operator]
    base = str(server.make_url("/v1"))
    async with openai.AsyncOpenAI(base_url=base, api_key="mk-test", max_retries=0) as client:
        for _ in range(5):
            answer = await client.chat.completions.with_raw_response.create(
                model="br/text",
                messages=CHAT,  # type: ignore[arg-type]
            )
            assert answer.parse().choices[0].message.content == "Let me check that."
    assert bedrock.signers == [BASE_KEY[0]] * 5
    async with aiohttp.ClientSession() as session:
        health = await (
            await session.get(
                server.make_url("/admin/health"), headers={"authorization": "Bearer mk-test"}
            )
        ).json()
    text = str(health)
    assert "irsa" in text
    assert "circuit_open" in text


async def test_with_no_other_key_the_client_gets_a_502_naming_the_identity(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    aws: FakeAws,
    bedrock: SignedBedrock,
    serve: object,
) -> None:
    env = irsa_env(isolate(monkeypatch, tmp_path), tmp_path, aws.base_url)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    aws.refuse_web_identity = True
    server = await serve(config(bedrock, "[{identity: default}]"))  # type: ignore[operator]
    async with aiohttp.ClientSession() as session:
        first = await session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": "br/text", "messages": CHAT},
            headers={"authorization": "Bearer mk-test"},
        )
        body = await first.json()
        assert first.status == 502, body
        error = body["error"]
        assert error["code"] == "credentials_unavailable"
        assert "the AWS default credential chain" in error["message"]
        assert "InvalidIdentityToken" in error["message"]
        assert WEB_IDENTITY_TOKEN not in str(body)
        # the key's circuit is open now: the next request is refused without an STS call
        calls = aws.count("AssumeRoleWithWebIdentity")
        second = await session.post(
            server.make_url("/v1/chat/completions"),
            json={"model": "br/text", "messages": CHAT},
            headers={"authorization": "Bearer mk-test"},
        )
        assert second.status == 503
        assert aws.count("AssumeRoleWithWebIdentity") == calls
    assert bedrock.requests == []


def test_gateway_process_with_openai_python(
    tmp_path: Path, aws: FakeAws, bedrock: SignedBedrock
) -> None:
    env = irsa_env(isolated_env(tmp_path), tmp_path, aws.base_url)
    path = tmp_path / "gateway.yaml"
    path.write_text(config(bedrock, "[{identity: default}]") + "logging: {level: debug}\n")
    port = free_port()
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "serve", "--config", str(path), "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**env, "PYTHONUNBUFFERED": "1", "PATH": os.environ.get("PATH", "")},
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        with openai.OpenAI(
            base_url=f"http://127.0.0.1:{port}/v1", api_key="mk-test", max_retries=0, timeout=20
        ) as client:
            with client.chat.completions.stream(model="br/two-tools", messages=CHAT) as stream:  # type: ignore[arg-type]
                final = stream.get_final_completion()
            calls = final.choices[0].message.tool_calls or []
            assert [c.function.name for c in calls] == ["get_weather", "get_time"]
    finally:
        proc.terminate()
        proc.wait(30)
    issued = next(k for k in aws.issued if k.startswith("ASIA"))
    assert bedrock.signers == [issued]
    secret, token = aws.issued[issued]
    logged = log.read_text()
    assert secret not in logged
    assert token is not None
    assert token not in logged
