"""Slowloris clients against a real gateway process: `server.client_header_timeout_s` and
`server.client_body_timeout_s` are total deadlines, so a client that trickles its head or
body a byte at a time is answered 408 (in its API's error shape) and cut off, holds no slot,
and well-behaved clients, kept-alive connections included, are served as before."""

from __future__ import annotations

import http.client
import json
import re
import select
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gateway.config import ConfigError
from gateway.config import parse_config
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.limits.served import MOCK_PROVIDER

HEAD_TIMEOUT_S = 1.0
BODY_TIMEOUT_S = 1.0
SLACK_S = 1.0  # how much later than its deadline a slow client may be cut off
TRICKLE_S = 0.25  # between two bytes of a slow client
CONFIG = f"""
server:
  client_header_timeout_s: {HEAD_TIMEOUT_S}
  client_body_timeout_s: {BODY_TIMEOUT_S}
  shutdown_grace_s: 2
  limits: {{max_concurrent_streams: 1}}
store: {{url: "memory://"}}
providers: [{MOCK_PROVIDER}]
models: [{{name: mock, targets: [{{provider: mock, model: mock}}]}}]
"""
CHAT = json.dumps({"model": "mock", "messages": [{"role": "user", "content": "hi"}]}).encode()
MESSAGES = json.dumps(
    {"model": "mock", "max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]}
).encode()


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start_gateway(CONFIG, tmp_path_factory.mktemp("slow-request"))
    yield gw
    stop_gateway(gw)


def _port(gw: Gateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def _connect(gw: Gateway) -> socket.socket:
    return socket.create_connection(("127.0.0.1", _port(gw)), timeout=5)


def _read_to_close(sock: socket.socket, until: float) -> tuple[bytes, bool]:
    """What the gateway sends until it closes the connection or `until` passes; whether it
    closed."""
    received = b""
    while time.monotonic() < until:
        readable, _, _ = select.select([sock], [], [], max(0.0, until - time.monotonic()))
        if not readable:
            break
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return received, True
        if not chunk:
            return received, True
        received += chunk
    return received, False


def _trickle(sock: socket.socket, data: bytes, started: float) -> tuple[bytes, bool, float]:
    """Send `data` a byte every TRICKLE_S, stopping as soon as the gateway answers or hangs
    up (so that no byte of ours races its answer into a reset). What it sent back, whether
    it closed the connection, and when that was (seconds since `started`)."""
    give_up = started + HEAD_TIMEOUT_S + BODY_TIMEOUT_S + 3 * SLACK_S
    for byte in data:
        if time.monotonic() > give_up:
            break
        readable, _, _ = select.select([sock], [], [], TRICKLE_S)
        if readable:
            break
        try:
            sock.sendall(bytes([byte]))
        except OSError:  # the gateway closed first
            break
    received, closed = _read_to_close(sock, max(give_up, time.monotonic() + 0.1))
    return received, closed, time.monotonic() - started


def _response(raw: bytes) -> tuple[int, dict[str, str], Any]:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return status, headers, json.loads(body)


def _post(gw: Gateway, path: str, body: bytes) -> int:
    request = urllib.request.Request(
        gw.url + path, data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as answer:
        answer.read()
        return int(answer.status)


def _head_timeouts(gw: Gateway) -> float:
    with urllib.request.urlopen(gw.url + "/metrics", timeout=5) as answer:
        text = answer.read().decode()
    found = re.search(
        r'^gateway_rejections_total\{reason="client_header_timeout"\} (\S+)$', text, re.M
    )
    assert found, "gateway_rejections_total has no client_header_timeout series"
    return float(found.group(1))


def _assert_openai_timeout(status: int, headers: dict[str, str], body: Any) -> None:
    assert status == 408
    assert headers.get("connection", "").lower() == "close"
    error = body["error"]
    assert error["type"] == "invalid_request_error"
    assert error["code"] == "request_timeout"
    assert error["param"] is None
    assert error["message"]


def test_a_trickled_head_is_answered_408_and_closed_at_the_deadline(gateway: Gateway) -> None:
    before = _head_timeouts(gateway)
    started = time.monotonic()
    with _connect(gateway) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        # steady bytes, but 40 of them would take 10 s: a total deadline, not an idle one
        raw, closed, elapsed = _trickle(sock, b"X-Slow: " + b"a" * 32 + b"\r\n\r\n", started)
    assert closed, raw
    assert HEAD_TIMEOUT_S - 0.2 <= elapsed <= HEAD_TIMEOUT_S + SLACK_S, elapsed
    _assert_openai_timeout(*_response(raw))
    assert _head_timeouts(gateway) == before + 1
    assert "the request head did not arrive within 1s" in gateway.log.read_text()
    assert _post(gateway, "/v1/chat/completions", CHAT) == 200


def test_a_connection_that_sends_nothing_is_closed_at_the_deadline(gateway: Gateway) -> None:
    before = _head_timeouts(gateway)
    started = time.monotonic()
    with _connect(gateway) as sock:
        raw, closed = _read_to_close(sock, started + HEAD_TIMEOUT_S + 2 * SLACK_S)
    elapsed = time.monotonic() - started
    assert closed
    assert raw == b""  # no request, so no answer
    assert HEAD_TIMEOUT_S - 0.2 <= elapsed <= HEAD_TIMEOUT_S + SLACK_S, elapsed
    assert _head_timeouts(gateway) == before + 1


def _slow_body(gateway: Gateway, path: str) -> tuple[bytes, bool, float]:
    body = b'{"model": "mock", "messages": []' + b" " * 40 + b"}"
    head = (
        f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode()
    with _connect(gateway) as sock:
        sock.sendall(head + body[:1])
        started = time.monotonic()
        # while it trickles, the gateway serves others: the slow body holds no slot
        # (max_concurrent_streams is 1)
        assert _post(gateway, "/v1/chat/completions", CHAT) == 200
        assert _post(gateway, "/v1/chat/completions", CHAT) == 200
        return _trickle(sock, body[1:], started)


def test_a_trickled_body_is_answered_408_and_closed(gateway: Gateway) -> None:
    raw, closed, elapsed = _slow_body(gateway, "/v1/chat/completions")
    assert closed, raw
    assert elapsed <= BODY_TIMEOUT_S + SLACK_S, elapsed
    _assert_openai_timeout(*_response(raw))
    assert "did not arrive within 1s (408)" in gateway.log.read_text()
    assert _post(gateway, "/v1/chat/completions", CHAT) == 200


def test_a_trickled_messages_body_is_answered_in_anthropics_shape(gateway: Gateway) -> None:
    raw, closed, elapsed = _slow_body(gateway, "/v1/messages")
    assert closed, raw
    assert elapsed <= BODY_TIMEOUT_S + SLACK_S, elapsed
    status, headers, body = _response(raw)
    assert status == 408
    assert headers.get("connection", "").lower() == "close"
    assert body["type"] == "error"
    assert set(body["error"]) == {"type", "message"}
    assert "did not arrive" in body["error"]["message"]
    assert _post(gateway, "/v1/messages", MESSAGES) == 200


def test_a_kept_alive_connection_serves_quick_requests_and_may_idle(gateway: Gateway) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", _port(gateway), timeout=5)
    try:
        sockets = []
        for pause in (0.0, 0.0, HEAD_TIMEOUT_S + 0.3):
            # idle between requests is keep-alive's business, not the head's deadline
            time.sleep(pause)
            conn.request("POST", "/v1/chat/completions", CHAT, {"Content-Type": "application/json"})
            answer = conn.getresponse()
            answer.read()
            assert answer.status == 200
            assert answer.getheader("Connection", "").lower() != "close"
            sockets.append(conn.sock)
        assert sockets[0] is not None
        assert all(s is sockets[0] for s in sockets)  # one connection for all three
    finally:
        conn.close()


@pytest.mark.parametrize("field", ["client_header_timeout_s", "client_body_timeout_s"])
def test_the_deadlines_must_be_positive(field: str, tmp_path: Path) -> None:
    text = f"server: {{{field}: 0}}\nproviders: [{MOCK_PROVIDER}]"
    with pytest.raises(ConfigError) as raised:
        parse_config(text, env={})
    assert any(p.endswith(f"server.{field}: must be > 0") for p in raised.value.problems), (
        raised.value.problems
    )
