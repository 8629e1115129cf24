"""Regressions for the 5xx answers that schemathesis (and probing around what it found)
turned up, through an in-process gateway with a master key: each was a 500 before."""

from __future__ import annotations

import gzip
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp.test_utils import TestServer

from gateway.accounting.keys import NewKey
from gateway.accounting.keys import make_key
from gateway.app import build_app
from gateway.config import parse_config
from gateway.errors import BadRequest
from gateway.inbound.messages_request import translate_request
from gateway.wire.anthropic import InboundRequest
from tests.api.error_shapes import error_shape_problem

MASTER = "sk-master-found-1"
AUTH = {"Authorization": f"Bearer {MASTER}"}
HI = [{"role": "user", "content": "hi"}]


@pytest.fixture
async def gateway() -> AsyncIterator[TestServer]:
    config = parse_config(
        f"""
auth: {{master_key: {MASTER}}}
store: {{url: "memory://"}}
providers: [{{name: mock, kind: mock}}]
models: [{{name: mock, targets: [{{provider: mock, model: mock}}]}}]
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()


async def post(
    server: TestServer, path: str, data: bytes, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.make_url(path),
            data=data,
            headers={**AUTH, "Content-Type": "application/json", **(headers or {})},
        ) as response,
    ):
        content = await response.read()
        problem = error_shape_problem(
            path, response.status, response.headers.get("Content-Type", ""), content
        )
        assert problem is None, problem
        return response.status, json.loads(content)


# --- expires_at that no date can show ----------------------------------------------------


@pytest.mark.parametrize(
    "expires_at", [-1.0867386679563593e72, 1e20, 2.0**70, "9999-12-31T23:59:59-05:00"]
)
def test_expires_at_out_of_the_date_range_is_a_bad_request(expires_at: float | str) -> None:
    spec = msgspec.convert({"name": "ci", "expires_at": expires_at}, NewKey)
    with pytest.raises(BadRequest) as caught:
        make_key(spec)
    assert caught.value.param == "expires_at"


@pytest.mark.parametrize("expires_at", [0, -62135596800, 253402300799.0, "9999-12-31T23:59:59Z"])
def test_expires_at_at_the_ends_of_the_date_range_is_kept(expires_at: float | str) -> None:
    record, _ = make_key(msgspec.convert({"name": "ci", "expires_at": expires_at}, NewKey))
    assert record.expires_at is not None


async def test_a_key_that_cannot_be_shown_is_not_created(gateway: TestServer) -> None:
    """Before: the key was stored, its creation answered 500 and every later
    GET /admin/keys failed on it too."""
    status, body = await post(gateway, "/admin/keys", b'{"name": "ci", "expires_at": -1e72}')
    assert status == 400
    assert body["error"]["param"] == "expires_at"
    async with (
        aiohttp.ClientSession() as session,
        session.get(gateway.make_url("/admin/keys"), headers=AUTH) as listed,
    ):
        assert listed.status == 200
        assert (await listed.json())["data"] == []


# --- bodies that aiohttp or msgspec could not read ---------------------------------------


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/admin/keys"])
async def test_json_nested_past_the_recursion_limit_is_a_bad_request(
    gateway: TestServer, path: str
) -> None:
    status, body = await post(gateway, path, b"[" * 5000 + b"]" * 5000)
    assert status == 400
    assert "nested too deeply" in json.dumps(body)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/embeddings"])
async def test_a_body_that_does_not_decompress_is_a_bad_request(
    gateway: TestServer, path: str
) -> None:
    status, body = await post(gateway, path, b"not gzip at all", {"Content-Encoding": "gzip"})
    assert status == 400
    assert "content-encoding" in json.dumps(body).lower()


async def test_a_gzip_body_is_still_read(gateway: TestServer) -> None:
    request = {"model": "mock", "messages": HI}
    data = gzip.compress(json.dumps(request).encode())
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            gateway.make_url("/v1/chat/completions"),
            data=data,
            headers={**AUTH, "Content-Type": "application/json", "Content-Encoding": "gzip"},
        ) as response,
    ):
        assert response.status == 200
        assert (await response.json())["object"] == "chat.completion"


# --- a Messages tool_choice whose type is not a string ------------------------------------


@pytest.mark.parametrize("kind", [{}, [], ["auto"], 3, None])
def test_tool_choice_type_that_is_not_a_string_is_a_bad_request(kind: Any) -> None:
    params = msgspec.convert(
        {"model": "mock", "max_tokens": 5, "messages": HI, "tool_choice": {"type": kind}},
        InboundRequest,
    )
    with pytest.raises(BadRequest) as caught:
        translate_request(params)
    assert caught.value.param == "tool_choice.type"


@pytest.mark.parametrize("path", ["/v1/messages", "/v1/messages/count_tokens"])
async def test_tool_choice_with_an_object_type_answers_400_in_anthropic_shape(
    gateway: TestServer, path: str
) -> None:
    request = {"model": "mock", "max_tokens": 5, "messages": HI, "tool_choice": {"type": {}}}
    status, body = await post(gateway, path, json.dumps(request).encode())
    assert status == 400
    assert body["error"]["type"] == "invalid_request_error"
    assert body["error"]["message"].startswith("tool_choice.type")
