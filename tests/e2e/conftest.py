"""A real gateway process on loopback, in front of the fake OpenAI upstream."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.upstreams.openai_upstream import FakeOpenAI

UPSTREAM_KEY = "sk-upstream-secret-123"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"gateway exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=1) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("gateway did not become healthy")


class Gateway:
    def __init__(self, url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.url = url
        self.proc = proc
        self.log = log

    @property
    def v1(self) -> str:
        return self.url + "/v1"

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])


def start_gateway(config: str, tmp: Path, extra_args: list[str] | None = None) -> Gateway:
    path = tmp / "gateway.yaml"
    path.write_text(config)
    port = free_port()
    log = tmp / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gateway",
                "serve",
                "--config",
                str(path),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                *(extra_args or []),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
    except RuntimeError:
        proc.kill()
        proc.wait()
        raise RuntimeError(log.read_text()) from None
    return Gateway(url, proc, log)


def stop_gateway(gw: Gateway) -> int:
    gw.proc.terminate()
    try:
        return gw.proc.wait(30)
    except subprocess.TimeoutExpired:
        gw.proc.kill()
        gw.proc.wait()
        raise


@pytest.fixture(scope="session")
def upstream() -> Iterator[FakeOpenAI]:
    fake = FakeOpenAI().start()
    yield fake
    fake.stop()


def gateway_config(upstream: FakeOpenAI, max_body: int = 262144) -> str:
    return f"""
server: {{max_body_bytes: {max_body}, shutdown_grace_s: 5}}
store: {{url: "memory://"}}
# one key serves every failure scenario here: key health must not carry one test into the next
routing: {{cooldown_s: 0.001, auth_hold_s: 0.001, circuit_failures: 1000}}
providers:
  - name: up
    kind: openai
    base_url: {upstream.base_url}
    keys: [{{key: "{UPSTREAM_KEY}"}}]
    timeouts: {{first_byte_s: 2, idle_s: 2}}
  - name: upshort
    kind: openai
    base_url: {upstream.base_url}
    keys: [{{key: "{UPSTREAM_KEY}"}}]
    timeouts: {{total_s: 1.5}}
  - name: badkeys
    kind: openai
    base_url: {upstream.base_url}
    keys: [{{key: sk-bad-1}}, {{key: sk-bad-2}}]
  - name: onebad
    kind: openai
    base_url: {upstream.base_url}
    keys: [{{key: sk-bad-1, weight: 1000000}}, {{key: "{UPSTREAM_KEY}"}}]
  - name: mock
    kind: mock
models:
  - name: fallback
    targets:
      - {{provider: up, model: fail-500, priority: 0}}
      - {{provider: up, model: text, priority: 1}}
  - name: mock
    targets: [{{provider: mock, model: mock}}]
"""


@pytest.fixture(scope="session")
def gateway(upstream: FakeOpenAI, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    gw = start_gateway(gateway_config(upstream), tmp_path_factory.mktemp("gw"))
    yield gw
    stop_gateway(gw)
