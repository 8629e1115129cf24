"""The rig's processes: the fake upstream, the gateways, nginx and Prometheus. Each is a
subprocess this module started and stops by its own PID (SIGTERM, then SIGKILL after a wait);
each listens on 127.0.0.1 only, and writes only inside the rig's temporary directory."""

from __future__ import annotations

import asyncio
import os
import pwd
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp

from tests.prometheus_server import PrometheusServer
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = Path(__file__).with_name("nginx.conf.template")
STOP_TIMEOUT_S = 10.0
START_TIMEOUT_S = 30.0
LOCAL = "127.0.0.1"


class RigError(RuntimeError):
    """A process of the rig did not start or stop as it should."""


def stop_process(proc: subprocess.Popen[bytes], timeout: float = STOP_TIMEOUT_S) -> int:
    """SIGTERM to this Popen's own PID, SIGKILL if it outlives `timeout`; its exit code."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    return wait_process(proc, timeout)


def wait_process(proc: subprocess.Popen[bytes], timeout: float) -> int:
    """Its exit code; SIGKILL to its own PID if it has not exited within `timeout`."""
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


async def wait_status(url: str, want: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Poll `url` until it answers `want`; fail with the log when the process dies first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    timeout = aiohttp.ClientTimeout(total=2)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RigError(f"{url}: process exited with {proc.returncode}\n{tail(log)}")
            try:
                async with session.get(url) as answer:
                    await answer.read()
                    if answer.status == want:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RigError(f"{url} did not answer {want} in {START_TIMEOUT_S}s\n{tail(log)}")


def tail(log: Path, lines: int = 30) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


class Upstream:
    """tests/upstreams/openai_upstream.py's fake OpenAI, in a process of its own (so that its
    work does not compete with the load client for one interpreter)."""

    def __init__(self, directory: Path) -> None:
        self.log = directory / "upstream.log"
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://{LOCAL}:{self.port}/v1"

    def start(self) -> Upstream:
        with self.log.open("wb") as err:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "deploy.rig.upstream"],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
            )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline()  # the port, once it listens
        self._proc.stdout.close()
        if not line.strip().isdigit():
            stop_process(self._proc)
            raise RigError(f"the fake upstream did not start\n{tail(self.log)}")
        self.port = int(line)
        return self

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)
            self._proc = None


class Gateway:
    """One `gateway serve` process on a fixed port, so that nginx's upstream block and
    Prometheus's target stay right across restarts."""

    def __init__(self, name: str, config: Path, directory: Path) -> None:
        self.name = name
        self.config = config
        self.port = free_port()
        self.log = directory / f"gateway-{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.stuck_log = ""

    @property
    def address(self) -> str:
        return f"{LOCAL}:{self.port}"

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    async def start(self) -> None:
        self.proc = await asyncio.to_thread(self._spawn)
        self.starts += 1
        await wait_status(f"{self.url}/readyz", 200, self.proc, self.log)

    def _spawn(self) -> subprocess.Popen[bytes]:
        args = [sys.executable, "-m", "gateway", "serve", "--config", str(self.config)]
        args += ["--host", LOCAL, "--port", str(self.port)]
        with self.log.open("ab") as out:
            return subprocess.Popen(
                args,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"},
            )

    def terminate(self) -> None:
        """SIGTERM: the gateway drains and exits by itself (see `wait`)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait(self, within_s: float) -> int | None:
        """The exit code of a gateway sent SIGTERM, or None for one still running after
        `within_s`: that one gets SIGABRT, which makes it write every thread's stack to its
        log (PYTHONFAULTHANDLER) before it dies; `stuck_log` keeps the end of that log."""
        assert self.proc is not None
        proc, self.proc = self.proc, None
        # no second SIGTERM: a drained gateway closing its event loop has no handler left
        try:
            return await asyncio.to_thread(proc.wait, within_s)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            await asyncio.to_thread(wait_process, proc, STOP_TIMEOUT_S)
            self.stuck_log = tail(self.log, 40)
            return None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc)
            self.proc = None


class Nginx:
    """Debian's nginx, never as root: when the rig runs as root it starts nginx as `nobody`
    (setpriv), in a directory that user owns."""

    def __init__(self, gateways: tuple[Gateway, Gateway], max_body: int) -> None:
        self.port = free_port()
        self.directory = Path(tempfile.mkdtemp(prefix="gw-rig-nginx-"))
        self.log = self.directory / "error.log"
        self.conf = self.directory / "nginx.conf"
        fields = {
            "DIR": str(self.directory),
            "PORT": str(self.port),
            "PORT_A": str(gateways[0].port),
            "PORT_B": str(gateways[1].port),
            "MAX_BODY": str(max_body),
            "FAIL_TIMEOUT": "1s",
            "STREAM_TIMEOUT": "3600s",
        }
        text = TEMPLATE.read_text()
        for name, value in fields.items():
            text = text.replace(f"@{name}@", value)
        if re.search(r"@[A-Z_]+@", text):
            raise RigError(f"{TEMPLATE} has a field the rig does not fill")
        self.conf.write_text(text)
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://{LOCAL}:{self.port}"

    def command(self) -> list[str]:
        binary = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin:/sbin")
        if binary is None:
            raise RigError("nginx is not installed: run tests/install_deps.sh (make rig does)")
        args = [binary, "-c", str(self.conf), "-p", str(self.directory), "-e", str(self.log)]
        args += ["-g", "daemon off;"]
        if os.geteuid() != 0:
            return args
        nobody = pwd.getpwnam("nobody")
        for path in [self.directory, *self.directory.iterdir()]:
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            raise RigError("running as root: setpriv (util-linux) is needed to drop to nobody")
        drop = [setpriv, f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}"]
        return [*drop, "--clear-groups", *args]

    async def start(self) -> None:
        self._proc = await asyncio.to_thread(self._spawn)
        # nginx answers 404 outside /v1: proof it listens without touching a gateway
        await wait_status(f"{self.url}/", 404, self._proc, self.log)

    def _spawn(self) -> subprocess.Popen[bytes]:
        binary = self.command()
        check = subprocess.run([*binary[:-2], "-t", "-q"], capture_output=True, timeout=30)
        if check.returncode != 0:
            raise RigError(f"nginx -t refused {self.conf}: {check.stderr.decode()}")
        return subprocess.Popen(
            binary, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )

    def stop(self) -> None:
        if self._proc is not None:
            stop_process(self._proc)  # SIGTERM to the master: fast shutdown of its workers
            self._proc = None

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)


SCRAPE_CONFIG = """\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: {job}
    metrics_path: /metrics
    static_configs:
      - targets: [{targets}]
"""


class Prometheus(PrometheusServer):
    """tests/prometheus_server.py's Prometheus, scraping every gateway of the rig."""

    def __init__(self, gateways: tuple[Gateway, ...]) -> None:
        super().__init__(gateways[0].address)
        targets = ", ".join(f'"{gateway.address}"' for gateway in gateways)
        config = SCRAPE_CONFIG.format(job=self.job, targets=targets)
        (self.directory / "prometheus.yml").write_text(config)

    def sample_times(self) -> dict[str, float]:
        """When each target was last scraped (Unix time), by its address."""
        series = self.query(f'timestamp(up{{job="{self.job}"}})')
        return {s["metric"]["instance"]: float(s["value"][1]) for s in series}

    async def wait_scraped_after(self, moment: float, within_s: float = 10.0) -> None:
        """Wait until every target has been scraped after Unix time `moment`."""
        deadline = time.monotonic() + within_s
        while True:
            times = await asyncio.to_thread(self.sample_times)
            if len(times) >= 2 and min(times.values()) > moment:
                return
            if time.monotonic() > deadline:
                raise RigError(f"Prometheus did not scrape every gateway after {moment}: {times}")
            await asyncio.sleep(0.2)
