"""A real PostgreSQL of the test's own (Debian's `postgresql` package): a cluster made by
`initdb` in a temporary directory, the `postgres` server started directly (its PID is the
Popen's) on a free 127.0.0.1 port, a unix socket in a directory of its own, password (scram)
authentication over TCP. `kill()` is a crash (SIGKILL, the server's children too) and
`start()` again brings it back on the same port and data directory, through crash recovery.

PostgreSQL refuses to run as root: as root, initdb and the server run as the `postgres`
system user (made by the package), the directories chowned to it. Debian keeps initdb out of
PATH (/usr/lib/postgresql/<version>/bin); tests/install_deps.sh installs the package, and a
test that needs it fails with that hint rather than skip.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 30.0
USER = "gateway"
DATABASE = "gateway"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def bin_dir() -> Path:
    """Where initdb and postgres are: on PATH, else Debian's newest /usr/lib/postgresql/N/bin."""
    found = shutil.which("initdb")
    if found:
        return Path(os.path.realpath(found)).parent
    versions = glob.glob("/usr/lib/postgresql/*/bin/initdb")
    if not versions:
        pytest.fail("PostgreSQL is not installed: run tests/install_deps.sh (make test does)")
    newest = max(versions, key=lambda path: int(Path(path).parent.parent.name))
    return Path(newest).parent


def _children(pid: int) -> list[int]:
    """The processes whose parent is `pid` (the server's backends and workers)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.append(int(entry))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


class PostgresServer:
    """One PostgreSQL cluster and its server; `url` carries the password."""

    def __init__(self, directory: Path | None = None, *, password: str | None = None) -> None:
        self.bin = bin_dir()
        self.password = password or secrets.token_urlsafe(12)
        self.port = free_port()
        self._user: Any = None  # the pwd entry of the user the server runs as (root: postgres)
        if os.geteuid() == 0:
            try:
                self._user = pwd.getpwnam("postgres")
            except KeyError:
                pytest.fail(
                    "running as root needs the postgres user (Debian's postgresql makes it)"
                )
        self._tmp = tempfile.TemporaryDirectory(prefix="gw-pg-")
        base = Path(self._tmp.name)
        if directory is not None and self._reachable(directory):
            base = directory
        base.mkdir(parents=True, exist_ok=True)
        self.data = base / "data"
        self.sockets = Path(self._tmp.name) / "s"  # short: a socket path has ~100 bytes
        self.log = base / "postgres.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._own(Path(self._tmp.name), base, self.sockets)

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def start(self) -> PostgresServer:
        fresh = not (self.data / "PG_VERSION").exists()
        if fresh:
            self._initdb()
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [
                    str(self.bin / "postgres"),
                    *("-D", str(self.data), "-p", str(self.port)),
                    *("-c", "listen_addresses=127.0.0.1"),
                    *("-c", f"unix_socket_directories={self.sockets}"),
                    # the kernel keeps what was written when the server is killed: no fsync
                    # needed, while synchronous_commit stays on (an acknowledged commit is
                    # in the kernel's hands before the client hears of it)
                    *("-c", "fsync=off", "-c", "full_page_writes=off"),
                    *("-c", "max_connections=50", "-c", "shared_buffers=32MB"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                **self._as_user(),
            )
        self._wait_ready()
        if fresh:
            self._run(
                self.bin / "createdb",
                *("-h", str(self.sockets), "-p", str(self.port), "-U", USER, DATABASE),
            )
        return self

    def kill(self) -> None:
        """A crash: SIGKILL to the server and every process it started, waited for."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        children = _children(proc.pid)
        proc.kill()
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(_alive(pid) for pid in children) and time.monotonic() < deadline:
            time.sleep(0.02)

    def stop(self) -> None:
        """A fast shutdown (SIGINT: sessions ended, a checkpoint written)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._proc = proc
            self.kill()

    def close(self) -> None:
        self.stop()
        self._tmp.cleanup()

    def psql(self, sql: str) -> str:
        """`sql` run by psql over the unix socket (as the superuser); its output."""
        return self._run(
            self.bin / "psql",
            *("-h", str(self.sockets), "-p", str(self.port), "-U", USER, "-d", DATABASE),
            *("-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql),
        )

    def _initdb(self) -> None:
        pwfile = Path(self._tmp.name) / "pw"
        pwfile.write_text(self.password + "\n")
        self._own(pwfile)
        self._run(
            self.bin / "initdb",
            *("-D", str(self.data), "-U", USER, f"--pwfile={pwfile}"),
            *("--auth-local=trust", "--auth-host=scram-sha-256"),
            *("--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"),
        )
        pwfile.unlink()

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                pytest.fail(f"postgres exited with {self._proc.returncode}:\n{self._log_tail()}")
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(self.port)],
                check=False,
                timeout=10,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.05)
        self.kill()
        pytest.fail(f"postgres did not accept connections in {START_TIMEOUT_S}s")

    def _run(self, *argv: str | Path) -> str:
        done = subprocess.run(
            [str(arg) for arg in argv],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            **self._as_user(),
        )
        if done.returncode != 0:
            pytest.fail(f"{argv[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
        out: str = done.stdout
        return out

    def _as_user(self) -> dict[str, Any]:
        if self._user is None:
            return {}
        return {"user": self._user.pw_uid, "group": self._user.pw_gid, "extra_groups": []}

    def _own(self, *paths: Path) -> None:
        for path in paths:
            if not path.exists():
                path.mkdir(parents=True)
            if self._user is not None:
                os.chown(path, self._user.pw_uid, self._user.pw_gid)

    def _reachable(self, directory: Path) -> bool:
        """Whether the server's user can reach `directory` (as root: every parent searchable
        by `postgres`); when not, the cluster lives in the temporary directory instead."""
        if self._user is None:
            return True
        for parent in directory.resolve().parents:
            mode = parent.stat()
            if mode.st_uid == self._user.pw_uid:
                continue
            if not mode.st_mode & (
                stat.S_IXOTH if mode.st_gid != self._user.pw_gid else stat.S_IXGRP
            ):
                return False
        return True

    def _log_tail(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-3000:]
        return ""


@pytest.fixture
def postgres_server() -> Iterator[PostgresServer]:
    """A running PostgreSQL with a database of its own, stopped at the end of the test."""
    server = PostgresServer().start()
    try:
        yield server
    finally:
        server.close()
