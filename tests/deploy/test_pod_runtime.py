"""What a pod of the example overlay runs, run here: the ConfigMap's config, the Secret's
variables (the store pointed at a loopback redis-server instead of the in-cluster one), the
Deployment's arguments. Its probes must answer as the manifests expect (liveness up while the
store is down, readiness not), and the image's HEALTHCHECK command must pass against a live
gateway and fail against a dead one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

from tests.deploy.kustomize import render
from tests.deploy.test_manifests import OVERLAY
from tests.deploy.test_manifests import config_text
from tests.deploy.test_manifests import gateway_container
from tests.deploy.test_manifests import secret_env
from tests.e2e.conftest import free_port
from tests.e2e.conftest import wait_healthy
from tests.redis_server import RedisServer
from tests.redis_server import redis_server

__all__ = ["redis_server"]  # the fixture, used by name

ROOT = Path(__file__).resolve().parents[2]


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code


def healthcheck(port: int) -> int:
    """The Dockerfile's HEALTHCHECK command, aimed at `port`: its exit status."""
    parsed = DockerfileParser(path=str(ROOT / "deploy/Dockerfile"))
    (check,) = [i["value"] for i in parsed.structure if i["instruction"] == "HEALTHCHECK"]
    argv = json.loads(check.partition("CMD ")[2])
    assert argv[0] == "python"
    code = argv[2].replace("127.0.0.1:8080", f"127.0.0.1:{port}")
    assert code != argv[2]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30)
    return done.returncode


@pytest.fixture
def pod(tmp_path: Path, redis_server: RedisServer) -> Iterator[tuple[str, int]]:
    objects = render(OVERLAY)
    config = tmp_path / "config.yaml"
    config.write_text(config_text(objects))
    args = list(gateway_container(objects)["args"])
    args[args.index("--config") + 1] = str(config)
    args[args.index("--host") + 1] = "127.0.0.1"  # loopback only, here
    port = free_port()
    env = {
        "PATH": os.environ["PATH"],
        "PYTHONUNBUFFERED": "1",
        **secret_env(objects),
        "GATEWAY_STORE_URL": redis_server.url(),
    }
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", *args, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=tmp_path,
        )
    try:
        wait_healthy(f"http://127.0.0.1:{port}", proc)
        yield f"http://127.0.0.1:{port}", port
        proc.send_signal(signal.SIGTERM)  # as the kubelet does after preStop
        assert proc.wait(30) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_probes_and_healthcheck_follow_the_store(
    pod: tuple[str, int], redis_server: RedisServer
) -> None:
    url, port = pod
    probes = gateway_container(render(OVERLAY))
    live = url + probes["livenessProbe"]["httpGet"]["path"]
    ready = url + probes["readinessProbe"]["httpGet"]["path"]
    started = url + probes["startupProbe"]["httpGet"]["path"]
    assert (status(started), status(live), status(ready)) == (200, 200, 200)
    assert healthcheck(port) == 0

    redis_server.stop()
    deadline = time.monotonic() + 15
    while status(ready) != 503 and time.monotonic() < deadline:
        time.sleep(0.1)
    # No traffic while the store is down, but no restart either: the process is fine.
    assert (status(ready), status(live)) == (503, 200)
    assert healthcheck(port) == 0

    redis_server.start()
    deadline = time.monotonic() + 15
    while status(ready) != 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert status(ready) == 200


def test_the_healthcheck_fails_when_nothing_answers() -> None:
    assert healthcheck(free_port()) != 0
