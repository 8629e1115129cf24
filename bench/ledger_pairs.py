"""Timed loop: admit + settle pairs per second on one accounting store, the two store calls
a request with a virtual key makes, from N concurrent tasks (a gateway's requests in flight).

    python -m bench.ledger_pairs [--store memory|sqlite|redis|redis-cluster] [--seconds 3]
        [--concurrency 1,16,64]

One key with a budget, rpm and tpm far above the load (so every admission passes and writes
what a real one writes); sqlite in a temp dir; redis a redis-server of the run's own on a
free loopback port (`redis-cluster`: three masters made with `redis-cli --cluster create`),
persisting nothing, stopped at the end. Prints one line per concurrency: pairs per second
and the mean time a pair took. See docs/accounting.md ("sqlite: group commit", "redis").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gateway.accounting.keys import budget_windows
from gateway.store.ledger import Admission
from gateway.store.ledger import Charge
from gateway.store.ledger import KeyRecord
from gateway.store.ledger import Ledger
from gateway.store.ledger import make_ledger

KEY = KeyRecord(id="k", name="k", secret_hash="h", budget_nanos=10**18, rpm=10**9, tpm=10**12)


async def pair(ledger: Ledger, ticket: str) -> None:
    now = time.time()
    admitted = await ledger.admit(
        Admission(
            ticket=ticket,
            now=now,
            model="m",
            reserve_nanos=1000,
            tokens=10,
            hold_s=660.0,
            windows=budget_windows(now),
            secret_hash="h",
        )
    )
    if admitted.verdict != "ok":
        raise RuntimeError(f"admission refused: {admitted.verdict}")
    await ledger.settle(
        Charge(
            key_id="k",
            model="up/m",
            cost_nanos=900,
            input_tokens=5,
            output_tokens=5,
            estimated=False,
            now=time.time(),
            ticket=ticket,
            window=admitted.window,
            reserved_nanos=admitted.reserved_nanos,
        )
    )


async def measure(url: str, concurrency: int, seconds: float) -> tuple[float, float]:
    """(pairs per second, mean seconds per pair) of `concurrency` tasks for `seconds`."""
    ledger = make_ledger(url)
    try:
        await ledger.create_key(KEY)
        done = 0
        deadline = time.perf_counter() + seconds

        async def worker(n: int) -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                done += 1
                await pair(ledger, f"t{n}-{done}")

        started = time.perf_counter()
        await asyncio.gather(*(worker(n) for n in range(concurrency)))
        elapsed = time.perf_counter() - started
    finally:
        await ledger.close()
    return done / elapsed, elapsed * concurrency / done


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _redis(directory: Path, *extra: str) -> tuple[subprocess.Popen[bytes], int]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH: run tests/install_deps.sh")
    port = _free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "no", "--dir", str(directory), *extra]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return proc, port
        time.sleep(0.02)
    proc.kill()
    raise SystemExit(f"redis-server did not listen on {port}")


@contextlib.contextmanager
def store_url(store: str, tmp: str) -> Iterator[str]:
    """The URL of a fresh store of kind `store` in `tmp` (servers stopped at the end)."""
    if store == "memory":
        yield "memory://"
        return
    if store == "sqlite":
        yield f"sqlite:///{tmp}/ledger.db"
        return
    servers: list[subprocess.Popen[bytes]] = []
    try:
        if store == "redis":
            proc, port = _redis(Path(tmp))
            servers.append(proc)
            yield f"redis://127.0.0.1:{port}/0"
            return
        ports = []
        for n in range(3):
            directory = Path(tmp) / f"node{n}"
            directory.mkdir()
            bus = str(_free_port())  # the default, port + 10000, may not exist
            proc, port = _redis(directory, "--cluster-enabled", "yes", "--cluster-port", bus)
            servers.append(proc)
            ports.append(port)
        nodes = [f"127.0.0.1:{p}" for p in ports]
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *nodes,
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for port in ports:
            deadline = time.monotonic() + 10
            while (
                b"cluster_state:ok"
                not in subprocess.run(
                    ["redis-cli", "-p", str(port), "cluster", "info"], capture_output=True
                ).stdout
            ):
                if time.monotonic() > deadline:
                    raise SystemExit("the cluster did not become ok")
                time.sleep(0.05)
        yield "redis+cluster://" + ",".join(nodes)
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_pairs", description=__doc__)
    parser.add_argument(
        "--store", choices=["memory", "sqlite", "redis", "redis-cluster"], default="sqlite"
    )
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", default="1,16,64")
    args = parser.parse_args()
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        with (
            tempfile.TemporaryDirectory(prefix="ledger-pairs-") as tmp,
            store_url(args.store, tmp) as url,
        ):
            rate, per_pair = asyncio.run(measure(url, concurrency, args.seconds))
        print(
            f"{args.store:<13} c={concurrency:<3} {rate:>8,.0f} pairs/s"
            f"  {per_pair * 1e6:>7,.0f} us per pair"
        )


if __name__ == "__main__":
    main()
