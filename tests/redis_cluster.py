"""A real Redis Cluster of the test's own: three `redis-server --cluster-enabled yes` masters
on free 127.0.0.1 ports (each in a temporary directory of its own), joined with
`redis-cli --cluster create ... --cluster-replicas 0`, ready once every node's `cluster info`
says `cluster_state:ok`.

Each master keeps an append-only file fsynced on every write (`--appendfsync always`) and its
`nodes.conf`, so a master stopped by PID (even SIGKILL) and started again on its port comes
back with its slots and with every write it acknowledged. `cluster-require-full-coverage no`
lets the other masters serve while one is down, which is how the gateway expects a cluster
to run (docs/configuration.md). When redis-server or redis-cli is missing the tests fail with
a hint rather than skip, like tests/redis_server.py.
"""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from tests.redis_server import free_port

START_TIMEOUT_S = 15.0


def _binary(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} is not on PATH: run tests/install_deps.sh (make test does)")
    return found


class ClusterNode:
    def __init__(self, binary: str, directory: Path) -> None:
        self.binary = binary
        self.port = free_port()
        self.bus_port = free_port()  # by default port + 10000, which may not exist
        self.dir = directory
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        args += ["--dir", str(self.dir), "--cluster-enabled", "yes"]
        args += ["--cluster-port", str(self.bus_port)]
        args += ["--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000"]
        args += ["--cluster-require-full-coverage", "no", "--save", ""]
        args += ["--appendonly", "yes", "--appendfsync", "always"]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"redis-server exited with {self.proc.returncode} on {self.port}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.02)
        self.stop()
        pytest.fail(f"redis-server did not listen on {self.port} in {START_TIMEOUT_S}s")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        proc.send_signal(sig)  # the Popen's own PID: only the server this helper started
        try:
            proc.wait(START_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=5)


class RedisClusterServers:
    """Three masters; `stop_node(i)` and `start_node(i)` keep node i's port and data."""

    def __init__(self, masters: int = 3) -> None:
        binary = _binary("redis-server")
        self.cli = _binary("redis-cli")
        self._tmp = tempfile.TemporaryDirectory(prefix="gw-redis-cluster-")
        self.nodes: list[ClusterNode] = []
        for n in range(masters):
            directory = Path(self._tmp.name) / f"node{n}"
            directory.mkdir()
            self.nodes.append(ClusterNode(binary, directory))

    def url(self, password: str = "") -> str:
        auth = f":{password}@" if password else ""
        return "redis+cluster://" + auth + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def start(self) -> RedisClusterServers:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        created = subprocess.run(
            [
                self.cli,
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            timeout=60,
        )
        if created.returncode != 0:
            self.close()
            pytest.fail(f"redis-cli --cluster create failed: {created.stdout!r} {created.stderr!r}")
        self.wait_ok()
        return self

    def wait_ok(self) -> None:
        """Until every running node says `cluster_state:ok` and knows every slot's owner."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                if all(self._ok(node) for node in self.nodes if node.proc is not None):
                    return
            except redis.RedisError:
                pass
            time.sleep(0.05)
        pytest.fail("the redis cluster did not become ok")

    def _ok(self, node: ClusterNode) -> bool:
        with node.client() as client:
            info = client.execute_command("CLUSTER", "INFO")
            text = info.decode() if isinstance(info, bytes) else str(info)
            return "cluster_state:ok" in text and "cluster_slots_assigned:16384" in text

    def node_of(self, key: str) -> int:
        """The index of the master that owns `key`'s slot."""
        slot = key_slot(key.encode())
        with self.nodes[0].client() as client:
            for start, end, owner, *_ in client.execute_command("CLUSTER", "SLOTS"):
                if start <= slot <= end:
                    port = int(owner[1])
                    return next(i for i, n in enumerate(self.nodes) if n.port == port)
        raise AssertionError(f"no owner for slot {slot}")

    def keys_on(self, index: int) -> list[bytes]:
        with self.nodes[index].client() as client:
            return sorted(client.keys("*"))

    def flush(self) -> None:
        for node in self.nodes:
            with node.client() as client:
                client.flushall()
                client.script_flush()

    def stop_node(self, index: int, sig: int = signal.SIGKILL) -> None:
        self.nodes[index].stop(sig)

    def start_node(self, index: int) -> None:
        self.nodes[index].start()
        self.wait_ok()

    def close(self) -> None:
        for node in self.nodes:
            node.stop()
        self._tmp.cleanup()


@pytest.fixture(scope="module")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """A running three-master cluster for the module's tests, stopped at the end."""
    servers = RedisClusterServers().start()
    try:
        yield servers
    finally:
        servers.close()
