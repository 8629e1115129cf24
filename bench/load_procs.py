"""Processes of the load benchmark: start, pin, wait for, measure and stop them.

Every process is started in its own session, with its output going to a file (a pipe nobody reads
would block it), and is stopped by its id: SIGTERM to the group it leads, a bounded wait, then
SIGKILL. Nothing here finds processes by name.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Pinning:
    """Which CPU runs what. None fields mean: not pinned."""

    load_cpu: int | None
    gateway_cpu: int | None

    @classmethod
    def detect(cls, enabled: bool) -> Pinning:
        """Load generator + fake upstream on the first allowed CPU, the gateway on the second."""
        cpus = sorted(os.sched_getaffinity(0))
        if not enabled or len(cpus) < 2 or shutil.which("taskset") is None:
            return cls(None, None)
        return cls(cpus[0], cpus[1])

    def prefix(self, cpu: int | None) -> list[str]:
        """The taskset prefix that pins a command to cpu (empty when not pinning)."""
        return [] if cpu is None else ["taskset", "-c", str(cpu)]

    def describe(self) -> str:
        """One line for the report."""
        if self.load_cpu is None:
            return "none (fewer than 2 CPUs, taskset missing, or --no-pin)"
        return (
            f"wrk, fake upstream and this driver on CPU {self.load_cpu}; "
            f"gateway on CPU {self.gateway_cpu}"
        )


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class Service:
    """A long-running subprocess (fake upstream or gateway) with its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, cwd: Path) -> None:
        self.name = name
        self.argv = argv
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.started_at = time.monotonic()
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.pid = self.process.pid

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process.poll() is None

    def log_tail(self, max_bytes: int = 8000) -> str:
        """The end of what the process printed."""
        self._log.flush()
        data = self.log_path.read_bytes()
        return data[-max_bytes:].decode("utf-8", "replace")

    def cpu_seconds(self) -> float:
        """User + system CPU time used so far by the process and the live processes of its
        group (a gateway's forked workers); 0.0 once it is gone."""
        return sum(process_cpu_seconds(pid) for pid in self.group())

    def group(self) -> list[int]:
        """The process and the live processes of its group (it leads one: see __init__)."""
        members = [self.pid]
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == self.pid:
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == self.pid:  # its process group
                members.append(int(entry.name))
        return members

    def peak_rss_kib(self) -> int | None:
        """The largest peak resident memory (VmHWM) of the process and its group's, if
        they are still there."""
        peaks = [p for p in map(_peak_rss_kib, self.group()) if p is not None]
        return max(peaks) if peaks else None

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM to the process group we created, bounded wait, then SIGKILL."""
        try:
            if self.alive():
                self._signal_group(signal.SIGTERM)
                try:
                    self.process.wait(timeout=grace_s)
                except subprocess.TimeoutExpired:
                    self._signal_group(signal.SIGKILL)
                    self.process.wait(timeout=5)
            return self.process.returncode
        finally:
            self._log.close()

    def _signal_group(self, signum: int) -> None:
        # start_new_session=True made the child the leader of a group whose id is its pid, so
        # forked workers get the signal too. Only called while the leader is not yet reaped,
        # so the id cannot have been reused by an unrelated process.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signum)


def _peak_rss_kib(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process from /proc (0.0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def http_get_status(url: str, timeout_s: float) -> int | None:
    """The status of a GET, or None when nothing answered."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            status: int = response.status
            return status
    except urllib.error.HTTPError as error:
        return error.code
    except (OSError, ValueError):
        return None


def wait_healthy(service: Service, url: str, timeout_s: float) -> str | None:
    """Polls url until it answers 200; returns None when it did, else why not."""
    deadline = time.monotonic() + timeout_s
    last: int | None = None
    while time.monotonic() < deadline:
        if not service.alive():
            return f"{service.name} exited with code {service.process.returncode}"
        last = http_get_status(url, timeout_s=2.0)
        if last == 200:
            return None
        time.sleep(0.1)
    return f"{service.name} not healthy after {timeout_s:.0f}s (last status: {last})"


def wait_idle(services: list[Service], max_wait_s: float = 5.0, max_cpu: float = 0.05) -> bool:
    """Waits until the services use under max_cpu of a core over two 0.2 s windows in a row."""
    deadline = time.monotonic() + max_wait_s
    window = 0.2
    calm = 0
    before = sum(s.cpu_seconds() for s in services)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = sum(s.cpu_seconds() for s in services)
        calm = calm + 1 if (now - before) / window < max_cpu else 0
        if calm >= 2:
            return True
        before = now
    return False
