"""The default limits never refuse legitimate load: no per-key cap unless one is configured,
and a process cap derived from the descriptors the process can hold (server/limits.py)."""

from __future__ import annotations

import asyncio
import resource
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from gateway.accounting.service import Principal
from gateway.config import LimitsConfig
from gateway.server.limits import SLOTS
from gateway.server.limits import StreamSlots
from gateway.server.limits import derived_stream_limit
from tests.limits.served import Served
from tests.limits.served import fill_until_refused
from tests.limits.served import served_with_session

# One virtual key, no limits configured: the old per-key default (256) would refuse part of
# this batch on a gateway nowhere near full.
BATCH = 300
STREAM = {"model": "mock/mock", "stream": True, "messages": [{"role": "user", "content": "x"}]}
CONFIG = """
store: {url: "memory://"}
auth: {master_key: sk-master}
providers:
  - {name: mock, kind: mock, mock: {chunks: 6, delay_s: 0.15}}
keys:
  - {name: batch-job, key: sk-batch}
"""


def test_the_default_process_cap_is_what_the_descriptor_limit_holds() -> None:
    # memory_bytes=None: no container memory limit (tests/limits/test_memory_cap.py has it)
    assert derived_stream_limit(20_000, memory_bytes=None) == 9_872  # (20000 - 256) // 2
    assert derived_stream_limit(1_256, memory_bytes=None) == 500
    assert derived_stream_limit(300, memory_bytes=None) == 64  # a floor, for a tiny limit
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert StreamSlots(LimitsConfig()).limit == derived_stream_limit(soft)
    assert StreamSlots(LimitsConfig(max_concurrent_streams=7)).limit == 7


def test_one_key_may_fill_the_process_and_the_overflow_is_a_503() -> None:
    slots = StreamSlots(LimitsConfig(), nofile=1_256, memory_bytes=None)  # 500 requests
    batch = Principal("virtual", secret_hash="h-batch")
    fill_until_refused(slots, batch, 500)


@pytest.fixture
async def gateway() -> AsyncIterator[tuple[Served, aiohttp.ClientSession]]:
    async with served_with_session(CONFIG) as pair:
        yield pair


async def test_a_batch_of_one_key_is_served_whole_with_the_default_limits(
    gateway: tuple[Served, aiohttp.ClientSession],
) -> None:
    served, session = gateway
    peak = 0

    async def one() -> tuple[int, bytes]:
        nonlocal peak
        async with session.post(
            served.url + "/v1/chat/completions",
            json={
                "model": "mock/mock",
                "stream": True,
                "messages": [{"role": "user", "content": "x"}],
            },
            headers={"Authorization": "Bearer sk-batch"},
        ) as response:
            peak = max(peak, served.app[SLOTS].total)
            return response.status, await response.read()

    results = await asyncio.wait_for(asyncio.gather(*(one() for _ in range(BATCH))), 60)
    assert [status for status, _ in results] == [200] * BATCH
    assert all(body.rstrip().endswith(b"data: [DONE]") for _, body in results)
    assert peak > 256  # they really were in flight together, past the old per-key default
    assert served.app[SLOTS].total == 0


def _low_soft_limit() -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))


def test_a_gateway_started_at_a_low_soft_limit_raises_it_and_says_its_cap(
    tmp_path: Path,
) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard <= 1024:
        pytest.skip("needs a hard descriptor limit above 1024 to show the raise")
    config = tmp_path / "gw.yaml"
    config.write_text(CONFIG, encoding="utf-8")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--port", str(port)],
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_low_soft_limit,
        cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 30
        line = ""
        assert proc.stderr is not None
        while time.monotonic() < deadline and "listening on" not in line:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                break
        target = min(hard, 1 << 20)
        assert f"up to {derived_stream_limit(target)} concurrent requests" in line, line
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        assert any(
            row.startswith("Max open files") and row.split()[3] == str(target)
            for row in limits.splitlines()
        ), limits
    finally:
        proc.send_signal(signal.SIGTERM)  # stopped by its id, as every process a test starts
        proc.communicate(timeout=30)  # drains and closes its stderr
