"""Clients cannot choose where the gateway connects, nor what it sends upstream besides the
body: for every provider kind, hostile model names addressed as `provider/model` reach the
configured host only, at the configured path, with the model URL-escaped where the path
carries it; client headers never reach an upstream except the documented allow-list.

Every provider here points at one recorder (tests/security/recorder.py) under its own base
path, which refuses every request (400): one attempt per request, recorded exactly as it
came on the wire.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl
from urllib.parse import unquote
from urllib.parse import urlsplit

import aiohttp
import pytest

from gateway.errors import BadRequest
from gateway.providers.base import path_segment
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.security.recorder import Recorder
from tests.security.recorder import Seen
from tests.vertex_credentials import service_account_file

pytestmark = pytest.mark.e2e

MASTER = "sk-master-url-test-3f1d"
HOSTILE_MODELS = [
    "../../admin",
    "..",
    ".",
    "a/../../b",
    "a?b=c",
    "a#frag",
    "a%2Fb",
    "a%252F..%252F",
    "user@evil.example",
    "x\r\nX-Injected: 1",
    "http://evil.example/v1",
    "//evil.example/x",
    "a b\tc",
    "models/../../x",
    "é/ü",
]
# where each provider lives under the recorder, and where the model goes in the request
KINDS: dict[str, dict[str, str]] = {
    "oa": {"kind": "openai", "base": "/oa/v1", "in": "body", "path": "/oa/v1/chat/completions"},
    "az": {"kind": "azure", "base": "/az", "in": "path"},
    "an": {"kind": "anthropic", "base": "/an", "in": "body", "path": "/an/v1/messages"},
    "ge": {"kind": "gemini", "base": "/ge", "in": "path"},
    "vx": {"kind": "vertex", "base": "/vx", "in": "path"},
    "bd": {"kind": "bedrock", "base": "/bd", "in": "path"},
    "ol": {"kind": "ollama", "base": "/ol", "in": "body", "path": "/ol/api/chat"},
}
# the path around the model, for the kinds whose path carries it (non-streaming calls)
PATH_AROUND = {
    "az": ("/az/openai/deployments/", "/chat/completions", {"api-version": "2024-10-21"}),
    "ge": ("/ge/v1beta/models/", ":generateContent", {}),
    "vx": (
        "/vx/v1/projects/p1/locations/us-central1/publishers/google/models/",
        ":generateContent",
        {},
    ),
    "bd": ("/bd/model/", "/converse", {}),
}
# The headers an upstream request may carry, all set by the gateway: HTTP framing, the
# provider's own protocol and credential headers; nothing from the client but
# `anthropic-beta`, on the native Messages path to an anthropic provider.
FRAMING = {"host", "content-type", "content-length", "accept", "accept-encoding", "user-agent"}
ALLOWED = {
    "openai": FRAMING | {"authorization"},
    "azure": FRAMING | {"api-key"},
    "anthropic": FRAMING | {"x-api-key", "anthropic-version"},
    "gemini": FRAMING | {"x-goog-api-key"},
    "vertex": FRAMING | {"authorization"},
    "bedrock": FRAMING | {"authorization", "x-amz-date", "x-amz-security-token"},
    "ollama": FRAMING | {"authorization"},
}
SMUGGLED = {
    "x-api-key": "client-x-api-key",
    "api-key": "client-api-key",
    "x-goog-api-key": "client-goog-key",
    "x-forwarded-for": "203.0.113.9",
    "x-forwarded-host": "client-evil.example",
    "forwarded": "for=203.0.113.9;host=client-evil.example",
    "anthropic-beta": "client-beta-flag",
    "anthropic-version": "client-version",
    "openai-organization": "client-org",
    "x-custom-smuggle": "client-custom",
    "cookie": "client-cookie=1",
    "proxy-authorization": "Basic client-proxy",
    "x-amz-security-token": "client-amz-token",
    "traceparent": "00-client0000000000000000000000000-0000000000000000-01",
}
CLIENT_MARKS = ("client", "203.0.113.9", MASTER)


@pytest.fixture(scope="module")
def rig(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Gateway, Recorder]]:
    recorder = Recorder().start()
    folder = tmp_path_factory.mktemp("gw-urls")
    credentials = service_account_file(folder, f"{recorder.base_url}/token")
    rec = recorder.base_url
    config = f"""
auth: {{master_key: {MASTER}}}
store: {{url: "memory://"}}
routing: {{max_attempts: 1}}
providers:
  - {{name: oa, kind: openai, base_url: "{rec}/oa/v1", keys: [{{key: sk-oa-url}}]}}
  - {{name: az, kind: azure, base_url: "{rec}/az", api_version: "2024-10-21",
      keys: [{{key: az-url-key}}]}}
  - {{name: an, kind: anthropic, base_url: "{rec}/an", keys: [{{key: sk-ant-url}}]}}
  - {{name: ge, kind: gemini, base_url: "{rec}/ge", keys: [{{key: ge-url-key}}]}}
  - {{name: vx, kind: vertex, base_url: "{rec}/vx", region: us-central1, project: p1,
      keys: [{{credentials_file: "{credentials}"}}]}}
  - {{name: bd, kind: bedrock, base_url: "{rec}/bd", region: us-east-1,
      keys: [{{aws_access_key_id: AKIAURLTEST, aws_secret_access_key: url-test-secret,
               aws_session_token: url-test-session}}]}}
  - {{name: ol, kind: ollama, base_url: "{rec}/ol"}}
models:
  - {{name: plain, targets: [{{provider: an, model: claude-x}}]}}
"""
    gateway = start_gateway(config, folder)
    try:
        yield gateway, recorder
    finally:
        stop_gateway(gateway)
        recorder.stop()


async def send(
    gw: Gateway, path: str, body: dict[str, Any], extra: dict[str, str] | None = None
) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {MASTER}", **SMUGGLED, **(extra or {})}
    timeout = aiohttp.ClientTimeout(total=20)
    async with (
        aiohttp.ClientSession(timeout=timeout) as session,
        session.post(gw.url + path, json=body, headers=headers) as response,
    ):
        return response.status, json.loads(await response.read())


def check_headers(kind: str, seen: Seen, allowed: set[str]) -> None:
    extra = set(seen.headers) - allowed
    assert not extra, f"{kind}: headers beyond the allow-list: {extra}"
    for name, value in seen.headers.items():
        assert not any(mark in value for mark in CLIENT_MARKS), f"{kind}: {name}: {value!r}"


def check_target(provider: str, model: str, seen: Seen, host: str) -> None:
    spec = KINDS[provider]
    assert seen.host == host, f"{provider}/{model!r}: Host {seen.host!r}"
    assert seen.method == "POST"
    raw = seen.raw_path
    assert all(32 < ord(c) < 127 for c in raw), f"{provider}/{model!r}: raw target {raw!r}"
    parts = urlsplit(raw)
    segments = parts.path.split("/")
    assert not {".", ".."} & set(segments), f"{provider}/{model!r}: {raw!r}"
    if spec["in"] == "body":
        assert raw == spec["path"], f"{provider}/{model!r}: {raw!r}"
        assert json.loads(seen.body)["model"] == model
        return
    prefix, suffix, query = PATH_AROUND[provider]
    assert parts.path.startswith(prefix), (provider, raw)
    assert parts.path.endswith(suffix), (provider, raw)
    assert dict(parse_qsl(parts.query)) == query, (provider, raw)
    escaped = parts.path[len(prefix) : len(parts.path) - len(suffix)]
    assert not set("/?#") & set(escaped), (provider, raw)
    sent = model.removeprefix("models/") if provider in ("ge", "vx") else model
    assert unquote(escaped) == sent, f"{provider}/{model!r}: sent as {escaped!r}"


@pytest.mark.parametrize("provider", list(KINDS))
async def test_hostile_model_names_stay_on_the_configured_host(
    rig: tuple[Gateway, Recorder], provider: str
) -> None:
    gw, recorder = rig
    host = f"127.0.0.1:{recorder.port}"
    for model in HOSTILE_MODELS:
        before = len(recorder.seen)
        body = {
            "model": f"{provider}/{model}",
            "messages": [{"role": "user", "content": "hi"}],
            "base_url": "http://client-evil.example/v1",
            "api_base": "http://client-evil.example/v1",
        }
        status, answer = await send(gw, "/v1/chat/completions", body, {"Host": "client-evil.x"})
        assert 400 <= status < 500, (provider, model, status, answer)
        new = recorder.seen[before:]
        # refused by the gateway itself, or sent once to the recorder, which refused it
        assert len(new) <= 1, answer
        for seen in new:
            check_target(provider, model, seen, host)
            check_headers(provider, seen, ALLOWED[KINDS[provider]["kind"]])


async def test_anthropic_beta_is_forwarded_on_the_native_messages_path_only(
    rig: tuple[Gateway, Recorder],
) -> None:
    gw, recorder = rig
    beta = {"anthropic-beta": "prompt-caching-2024-07-31"}
    messages = {"model": "plain", "max_tokens": 8, "messages": [{"role": "user", "content": "x"}]}
    before = len(recorder.seen)
    await send(gw, "/v1/messages", messages, beta)
    await send(gw, "/v1/chat/completions", {**messages, "max_tokens": 8}, beta)
    await send(gw, "/v1/responses", {"model": "plain", "input": "x"}, beta)
    native, chat, responses = recorder.seen[before:]
    assert native.headers["anthropic-beta"] == "prompt-caching-2024-07-31"
    check_headers("anthropic native", native, ALLOWED["anthropic"] | {"anthropic-beta"})
    for seen in (chat, responses):
        check_headers("anthropic translated", seen, ALLOWED["anthropic"])
    assert all(s.raw_path == "/an/v1/messages" for s in (native, chat, responses))


async def test_every_kind_sends_only_allowed_headers_when_streaming(
    rig: tuple[Gateway, Recorder],
) -> None:
    gw, recorder = rig
    for provider, spec in KINDS.items():
        before = len(recorder.seen)
        body = {
            "model": f"{provider}/m",
            "stream": True,
            "messages": [{"role": "user", "content": "x"}],
        }
        await send(gw, "/v1/chat/completions", body)
        (seen,) = recorder.seen[before:]
        assert seen.host == f"127.0.0.1:{recorder.port}"
        assert seen.raw_path.startswith(spec["base"] + "/"), seen.raw_path
        check_headers(provider, seen, ALLOWED[spec["kind"]])


def test_dot_segments_are_refused() -> None:
    """Escaping `..` as `%2E%2E` is not enough (servers decode it back): refused instead."""
    for value in ("..", ".", "%2E%2E", "../x"):
        with pytest.raises(BadRequest):
            path_segment(value)
    assert path_segment("a..b") == "a..b"


def test_the_gateway_never_read_a_client_url() -> None:
    """No request field names where to connect: the wire types have none."""
    from gateway.wire.openai_chat import ChatRequest

    fields = set(ChatRequest.__struct_fields__)
    assert not fields & {"base_url", "api_base", "url", "host", "endpoint", "path"}
