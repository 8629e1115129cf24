"""A real `prometheus` of the test's own: on a free 127.0.0.1 port, scraping one target every
second, its database in a temporary directory that goes away with it.

`make test` installs Debian's `prometheus` first (tests/install_deps.sh); when it is missing
the tests that need it fail with that hint rather than skip, so a green run always covers it.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.redis_server import free_port

START_TIMEOUT_S = 15.0
SCRAPE_INTERVAL_S = 1

CONFIG = """\
global:
  scrape_interval: {interval}s
  scrape_timeout: {interval}s
  evaluation_interval: {interval}s
scrape_configs:
  - job_name: {job}
    metrics_path: {path}
    static_configs:
      - targets: ["{target}"]
"""


class PrometheusServer:
    """One prometheus process scraping `target` ("127.0.0.1:PORT") at `path`."""

    def __init__(self, target: str, path: str = "/metrics", job: str = "gateway") -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("prometheus is not on PATH: run tests/install_deps.sh (make test does)")
        self.binary = binary
        self.job = job
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._dir = tempfile.TemporaryDirectory(prefix="gw-prometheus-")
        self.directory = Path(self._dir.name)
        self.log = self.directory / "prometheus.log"
        config = CONFIG.format(interval=SCRAPE_INTERVAL_S, job=job, path=path, target=target)
        (self.directory / "prometheus.yml").write_text(config)
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> PrometheusServer:
        args = [
            self.binary,
            f"--config.file={self.directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={self.directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{self.port}",
            "--log.level=warn",
        ]
        with self.log.open("wb") as out:
            self._proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT
            )
        self._wait_ready()
        return self

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.terminate()  # the Popen's own PID: only the server this helper started
        try:
            proc.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def close(self) -> None:
        self.stop()
        self._dir.cleanup()

    def api(self, path: str, **params: str) -> Any:
        """The `data` of a Prometheus HTTP API answer; a failed query raises with its error."""
        query = urllib.parse.urlencode(params)
        try:
            with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=5) as answer:
                body = json.load(answer)
        except urllib.error.HTTPError as err:
            with err:
                body = json.load(err)
        if body.get("status") != "success":
            raise AssertionError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query's series (a scalar answer comes back as one series without labels)."""
        data = self.api("/api/v1/query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def scrapes(self) -> float:
        """How many times the target was scraped successfully in the last minute."""
        series = self.query(f'sum_over_time(up{{job="{self.job}"}}[1m])')
        return float(series[0]["value"][1]) if series else 0.0

    def wait_scrapes(self, count: int, timeout: float = 10.0) -> None:
        """Wait until `count` more successful scrapes than now have happened."""
        target = self.scrapes() + count
        deadline = time.monotonic() + timeout
        while self.scrapes() < target:
            down = [t for t in self.targets() if t["health"] == "down"]
            if down:
                raise AssertionError(f"Prometheus cannot scrape {down[0]['scrapeUrl']}: {down}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{count} scrapes did not happen in {timeout}s: {self.targets()}"
                )
            time.sleep(0.2)

    def targets(self) -> list[dict[str, Any]]:
        active: list[dict[str, Any]] = self.api("/api/v1/targets")["activeTargets"]
        return active

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                pytest.fail(
                    f"prometheus exited with {self._proc.returncode}: {self.log.read_text()}"
                )
            try:
                with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as answer:
                    if answer.status == 200:
                        return
            except urllib.error.HTTPError as err:
                err.close()  # 503 while it loads its database
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        pytest.fail(f"prometheus was not ready on port {self.port} in {START_TIMEOUT_S}s")


def finite(series: dict[str, Any]) -> bool:
    """Whether an instant-query series carries a number (not NaN or an infinity)."""
    return math.isfinite(float(series["value"][1]))
