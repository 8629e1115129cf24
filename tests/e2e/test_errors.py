"""Bad input and upstream failures: each gets its status and an OpenAI-shaped body."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import openai
import pytest

from tests.e2e.conftest import Gateway
from tests.upstreams.openai_upstream import TEXT_PIECES

CHAT = [{"role": "user", "content": "hi"}]


def post(
    gateway: Gateway,
    body: bytes,
    path: str = "/v1/chat/completions",
    method: str = "POST",
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        gateway.url + path,
        data=body if method == "POST" else None,
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as err:
        with err:  # the error holds the response's socket
            return err.code, dict(err.headers), err.read()


def error_of(body: bytes) -> dict[str, Any]:
    parsed = json.loads(body)
    assert set(parsed) == {"error"}
    error = parsed["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert isinstance(error["message"], str)
    assert error["message"]
    return dict(error)


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        (b'{"model": "mock", "messages": [', 400, None),
        (b"", 400, None),
        (b"[1, 2]", 400, None),
        (b'{"model": "mock"}', 400, "messages"),
        (b'{"model": 5, "messages": []}', 400, "model"),
        (
            b'{"model": "mock", "messages": [{"role": "user", "content": 7}]}',
            400,
            "messages[0].content",
        ),
        (
            b'{"model": "mock", "messages": [{"role": "robot", "content": "x"}]}',
            400,
            "messages[0].role",
        ),
        (b'{"model": "mock", "messages": [{"content": "x"}]}', 400, "messages[0].role"),
        (
            b'{"model": "mock", "messages": ' + json.dumps(CHAT).encode() + b', "stream": "yes"}',
            400,
            "stream",
        ),
        (b'{"model": "mock", "messages": []}', 400, "messages"),
        (b'{"model": "nope", "messages": ' + json.dumps(CHAT).encode() + b"}", 404, "model"),
        (b'{"model": "ghost/gpt", "messages": ' + json.dumps(CHAT).encode() + b"}", 404, "model"),
    ],
)
def test_bad_requests(gateway: Gateway, body: bytes, status: int, param: str | None) -> None:
    got, headers, data = post(gateway, body)
    assert got == status, data
    error = error_of(data)
    assert error["param"] == param
    assert headers["x-request-id"]


def test_body_too_large(gateway: Gateway) -> None:
    big = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "x" * 300_000}]})
    status, _, data = post(gateway, big.encode())
    assert status == 413
    assert error_of(data)["code"] == "request_too_large"


def test_unknown_route_and_method(gateway: Gateway) -> None:
    status, _, data = post(gateway, b"{}", path="/v1/nothing")
    assert status == 404
    error_of(data)
    status, _, data = post(gateway, b"", path="/v1/chat/completions", method="GET")
    assert status == 405
    error_of(data)


def test_request_id_echoed(gateway: Gateway) -> None:
    status, headers, _ = post(
        gateway,
        json.dumps({"model": "mock", "messages": CHAT}).encode(),
        headers={"x-request-id": "trace-abc.123"},
    )
    assert status == 200
    assert headers["x-request-id"] == "trace-abc.123"
    assert headers["x-gateway-provider"] == "mock"
    assert headers["x-gateway-attempts"] == "1"


FAILURES = [
    ("up/fail-500", 502, openai.InternalServerError),
    ("up/fail-429", 429, openai.RateLimitError),
    ("up/fail-400", 400, openai.BadRequestError),
    ("up/error-before", 502, openai.InternalServerError),
    ("up/silent", 504, openai.InternalServerError),
    ("upshort/silent", 504, openai.InternalServerError),
]
# An error event exists only in a stream; a silent non-streaming upstream is bounded by
# total_s, which only the `upshort` provider keeps short.
STREAM_ONLY = {"up/error-before", "up/silent"}


@pytest.mark.parametrize(
    ("model", "status", "exc", "stream"),
    [
        (*case, stream)
        for case in FAILURES
        for stream in (False, True)
        if stream or case[0] not in STREAM_ONLY
    ],
)
def test_upstream_failures_before_commit(
    gateway: Gateway, model: str, status: int, exc: type[Exception], stream: bool
) -> None:
    body = json.dumps({"model": model, "messages": CHAT, "stream": stream}).encode()
    got, headers, data = post(gateway, body)
    assert got == status, data
    error_of(data)
    # a 5xx is tried once more on its target (routing.retries_per_target, default 1); a 429
    # without Retry-After, a 400, an error event or a timeout are not
    assert headers["x-gateway-attempts"] == ("2" if model == "up/fail-500" else "1")
    client = openai.OpenAI(base_url=gateway.v1, api_key="k", max_retries=0, timeout=20)
    with pytest.raises(exc):
        client.chat.completions.create(model=model, messages=CHAT, stream=stream)  # type: ignore[call-overload]


@pytest.mark.parametrize("model", ["up/error-after", "up/truncated"])
def test_failure_after_commit_is_an_error_event(gateway: Gateway, model: str) -> None:
    body = json.dumps({"model": model, "messages": CHAT, "stream": True}).encode()
    status, _, data = post(gateway, body)
    assert status == 200
    events = [e.removeprefix(b"data: ") for e in data.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    error = json.loads(events[-2])["error"]
    assert error["message"]
    assert any(b'"content"' in e for e in events[:-2])
    client = openai.OpenAI(base_url=gateway.v1, api_key="k", max_retries=0, timeout=20)
    with pytest.raises(openai.APIError):
        for _ in client.chat.completions.create(model=model, messages=CHAT, stream=True):  # type: ignore[call-overload]
            pass


def test_content_before_an_error_in_the_same_read_is_delivered(gateway: Gateway) -> None:
    body = json.dumps({"model": "up/error-mixed", "messages": CHAT, "stream": True}).encode()
    status, _, data = post(gateway, body)
    assert status == 200
    events = [e.removeprefix(b"data: ") for e in data.split(b"\n\n") if e.startswith(b"data: ")]
    content = [json.loads(e)["choices"][0]["delta"].get("content") for e in events[:-2]]
    assert "".join(c for c in content if c) == "".join(TEXT_PIECES[:3])
    assert json.loads(events[-2])["error"]["message"] == "model crashed"
    assert events[-1] == b"[DONE]"


def test_failover_to_next_priority(gateway: Gateway) -> None:
    for stream in (False, True):
        body = json.dumps({"model": "fallback", "messages": CHAT, "stream": stream}).encode()
        status, headers, _ = post(gateway, body)
        assert status == 200
        assert headers["x-gateway-attempts"] == "3"  # the failure retried once, then failover
        assert headers["x-gateway-model"] == "text"
        assert headers["x-gateway-provider"] == "up"


@pytest.mark.parametrize("stream", [False, True])
def test_failover_to_the_next_key(gateway: Gateway, stream: bool) -> None:
    body = json.dumps({"model": "onebad/text", "messages": CHAT, "stream": stream}).encode()
    status, headers, _ = post(gateway, body)
    assert status == 200
    assert headers["x-gateway-attempts"] == "2"  # the heavy bad key first, then the good one
    body = json.dumps({"model": "badkeys/text", "messages": CHAT, "stream": stream}).encode()
    status, headers, data = post(gateway, body)
    assert status == 502
    assert headers["x-gateway-attempts"] == "2"
    message = error_of(data)["message"]
    assert "rejected the gateway's credentials (HTTP 401)" in message
    assert "sk-bad" not in data.decode()  # the provider quotes the key: never passed on


def test_models_list(gateway: Gateway) -> None:
    client = openai.OpenAI(base_url=gateway.v1, api_key="k", max_retries=0)
    ids = [m.id for m in client.models.list()]
    assert ids == ["fallback", "up/fail-500", "up/text", "mock", "mock/mock"]  # no provider list
    status, _, _ = post(gateway, b"", path="/v1/models", method="GET")
    assert status == 200


def test_worker_survives_everything(gateway: Gateway) -> None:
    assert gateway.proc.poll() is None
    status, _, _ = post(gateway, b"", path="/healthz", method="GET")
    assert status == 200
