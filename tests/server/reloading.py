"""What the reload tests share: a real gateway process started on a config file of the
test's own (a plain file or a Kubernetes-style ConfigMap directory), its file rewritten in
place or swapped, and small synchronous clients for its API."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.e2e.conftest import free_port
from tests.e2e.conftest import wait_healthy

MASTER = "sk-master-reload-7f3a9c"
PICKUP_S = 2.0  # the contract: a changed file is in force within this long


class Served:
    """One gateway process serving `path`."""

    def __init__(self, path: Path, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.path, self.proc, self.port, self.log = path, proc, port, log
        self.url = f"http://127.0.0.1:{port}"

    def hup(self) -> None:
        self.proc.send_signal(signal.SIGHUP)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def launch(path: Path, *extra: str) -> Served:
    port = free_port()
    log = path.parent / f"gateway-{port}.log"
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
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    served = Served(path, proc, port, log)
    try:
        wait_healthy(served.url, proc)
    except RuntimeError:
        served.stop()
        raise RuntimeError(log.read_text()) from None
    return served


def call(
    served: Served,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    key: str | None = MASTER,
) -> tuple[int, bytes]:
    """One request on a fresh connection (so that, with workers, any worker may answer)."""
    headers = {"Content-Type": "application/json", "Connection": "close"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(served.url + path, data, headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()


def chat(served: Served, model: str, key: str | None = MASTER) -> tuple[int, dict[str, Any]]:
    status, raw = call(
        served,
        "POST",
        "/v1/chat/completions",
        {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50},
        key,
    )
    return status, json.loads(raw)


def admin_config(served: Served) -> dict[str, Any]:
    status, raw = call(served, "GET", "/admin/config")
    assert status == 200, raw
    answer: dict[str, Any] = json.loads(raw)
    return answer


def reload_count(served: Served, result: str) -> float:
    _, raw = call(served, "GET", "/metrics", key=None)
    for line in raw.decode().splitlines():
        if line.startswith(f'gateway_config_reloads_total{{result="{result}"}}'):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("no gateway_config_reloads_total in /metrics")


def within(seconds: float, check: Callable[[], bool], every: float = 0.05) -> float:
    """How long until `check()` held (raises if it did not within `seconds`)."""
    started = time.monotonic()
    while True:
        if check():
            return time.monotonic() - started
        if time.monotonic() - started > seconds:
            raise AssertionError(f"not within {seconds}s")
        time.sleep(every)


def rewrite(path: Path, text: str) -> None:
    """Rewrite the file in place, as an editor without a rename would."""
    with path.open("w") as f:
        f.write(text)


def configmap(directory: Path, text: str) -> Path:
    """A directory laid out as the kubelet mounts a ConfigMap: `config.yaml -> ..data/
    config.yaml`, `..data -> ..<timestamp>`; returns the path the gateway is given."""
    directory.mkdir(parents=True, exist_ok=True)
    swap_configmap(directory, text)
    link = directory / "config.yaml"
    link.symlink_to("..data/config.yaml")
    return link


def swap_configmap(directory: Path, text: str) -> None:
    """The kubelet's atomic update: a new timestamped directory, `..data` re-pointed to it
    by a rename, the old directory removed."""
    old = (directory / "..data").resolve() if (directory / "..data").exists() else None
    fresh = directory / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
    fresh.mkdir()
    (fresh / "config.yaml").write_text(text)
    tmp = directory / "..data_tmp"
    tmp.symlink_to(fresh.name)
    os.rename(tmp, directory / "..data")
    if old is not None:
        for child in old.iterdir():
            child.unlink()
        old.rmdir()
