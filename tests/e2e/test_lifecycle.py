"""Process lifecycle: client disconnects, graceful shutdown, several workers."""

from __future__ import annotations

import http.client
import json
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import gateway_config
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

CHAT = [{"role": "user", "content": "hi"}]
SLOW_MOCK = """
  - name: slowmock
    kind: mock
    mock: {chunks: 10, delay_s: 0.1}
models:"""


def stream_request(
    port: int, model: str
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
    body = json.dumps({"model": model, "messages": CHAT, "stream": True})
    conn.request(
        "POST", "/v1/chat/completions", body=body, headers={"Content-Type": "application/json"}
    )
    response = conn.getresponse()
    assert response.status == 200
    return conn, response


def port_of(gw: Gateway) -> int:
    return int(gw.url.rsplit(":", 1)[1])


def test_client_disconnect_closes_upstream_within_a_second(
    gateway: Gateway, upstream: FakeOpenAI
) -> None:
    upstream.disconnected.clear()
    closed_before = upstream.closed
    conn, response = stream_request(port_of(gateway), "up/slow")
    assert response.readline().startswith(b"data: ")  # the stream is flowing
    conn.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
    conn.close()
    took = upstream.wait_disconnect(1.0)
    assert took is not None, "the upstream connection stayed open after the client left"
    assert upstream.closed == closed_before + 1


def test_sigterm_lets_streams_finish(upstream: FakeOpenAI, tmp_path: Path) -> None:
    config = gateway_config(upstream).replace("\nmodels:", SLOW_MOCK, 1)
    gw = start_gateway(config, tmp_path)
    probe = http.client.HTTPConnection("127.0.0.1", port_of(gw), timeout=10)
    probe.request("GET", "/readyz")
    before = probe.getresponse()
    assert before.status == 200
    before.read()
    conn, response = stream_request(port_of(gw), "slowmock/mock")
    first = response.readline()
    assert first.startswith(b"data: ")
    gw.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    probe.request("GET", "/readyz")
    ready = probe.getresponse()
    assert ready.status == 503
    ready.read()
    rest = response.read()
    assert rest.rstrip().endswith(b"data: [DONE]")
    assert b'"error"' not in rest
    assert gw.proc.wait(15) == 0
    conn.close()
    probe.close()


def test_grace_expiry_ends_streams_with_an_error_event(
    upstream: FakeOpenAI, tmp_path: Path
) -> None:
    config = gateway_config(upstream).replace("shutdown_grace_s: 5", "shutdown_grace_s: 1")
    gw = start_gateway(config, tmp_path)
    conn, response = stream_request(port_of(gw), "up/slow")
    assert response.readline().startswith(b"data: ")
    started = time.monotonic()
    gw.proc.send_signal(signal.SIGTERM)
    rest = response.read()
    assert time.monotonic() - started < 5
    events = [e for e in rest.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    error = json.loads(events[-2].removeprefix(b"data: "))["error"]
    assert error["code"] == "server_shutting_down"
    assert gw.proc.wait(15) == 0
    conn.close()


def test_workers_share_the_port(upstream: FakeOpenAI, tmp_path: Path) -> None:
    gw = start_gateway(gateway_config(upstream), tmp_path, ["--workers", "2"])
    deadline = time.monotonic() + 20
    while gw.log.read_text().count("listening on") < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        for _ in range(40):
            conn = http.client.HTTPConnection("127.0.0.1", port_of(gw), timeout=10)
            conn.request(
                "POST",
                "/v1/chat/completions",
                body=json.dumps({"model": "mock", "messages": CHAT}),
                headers={"Content-Type": "application/json"},
            )
            r = conn.getresponse()
            assert r.status == 200
            assert json.loads(r.read())["choices"][0]["message"]["content"]
            conn.close()
    finally:
        assert stop_gateway(gw) == 0
    log = gw.log.read_text()
    workers = {
        line.split("[", 1)[1].split("]", 1)[0]
        for line in log.splitlines()
        if "listening on" in line
    }
    assert len(workers) == 2, log


@pytest.fixture(autouse=True)
def _no_thread_leak() -> None:
    before = threading.active_count()
    yield
    assert threading.active_count() <= before + 1


@pytest.mark.parametrize("model", ["up/think", "up/hold"])
def test_commit_after_silence_then_keepalive(
    upstream: FakeOpenAI, tmp_path: Path, model: str
) -> None:
    """A model that thinks (in the stream, or before its headers): headers go out at
    commit_after_s, then keep-alive comments."""
    config = gateway_config(upstream).replace(
        "shutdown_grace_s: 5", "shutdown_grace_s: 5, commit_after_s: 0.2, keepalive_s: 0.25"
    )
    gw = start_gateway(config, tmp_path)
    try:
        started = time.monotonic()
        conn, response = stream_request(port_of(gw), model)
        assert time.monotonic() - started < 0.8  # committed before the first content
        assert response.getheader("x-gateway-provider") == "up"
        body = response.read()
        assert b": keep-alive\n\n" in body
        content = [
            json.loads(e[6:])["choices"][0]["delta"].get("content")
            for e in body.split(b"\n\n")
            if e.startswith(b"data: {")
        ]
        assert "".join(c for c in content if c) == "Hello, world!"
        assert body.rstrip().endswith(b"data: [DONE]")
        conn.close()
    finally:
        stop_gateway(gw)


def test_idle_upstream_after_commit_is_an_error_event(gateway: Gateway) -> None:
    conn, response = stream_request(port_of(gateway), "up/stall")
    started = time.monotonic()
    body = response.read()
    assert 1.5 < time.monotonic() - started < 6
    events = [e for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    assert events[-1] == b"data: [DONE]"
    assert json.loads(events[-2][6:])["error"]["code"] == "idle_timeout"
    conn.close()
