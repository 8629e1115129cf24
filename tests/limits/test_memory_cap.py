"""The process cap also counts the container's memory limit (server/memory_limit.py): a pod
with a 512 MiB limit and a `nofile` of 1,048,576 is capped where its memory holds, and a
request over the cap is a 503 with Retry-After instead of the kernel killing the process
with every stream it holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.accounting.service import Principal
from gateway.app import build_app
from gateway.config import LimitsConfig
from gateway.config import parse_config
from gateway.server import memory_limit
from gateway.server.limits import SLOTS
from gateway.server.limits import StreamSlots
from gateway.server.limits import derived_stream_limit
from gateway.server.memory_limit import container_memory_bytes
from gateway.server.memory_limit import streams_in_memory
from tests.limits.served import fill_until_refused

MIB = 1 << 20
CONTAINER_NOFILE = 1 << 20  # a usual container default
IN_512_MIB = (512 - 64) * MIB // (40 << 10)  # 11,468


def cgroup(tmp_path: Path, v2: str | None = None, v1: str | None = None) -> Path:
    if v2 is not None:
        (tmp_path / "memory.max").write_text(v2 + "\n")
    if v1 is not None:
        (tmp_path / "memory").mkdir()
        (tmp_path / "memory" / "memory.limit_in_bytes").write_text(v1 + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("v2", "v1", "expected"),
    [
        (str(512 * MIB), None, 512 * MIB),
        ("max", None, None),  # v2 without a limit
        (None, str(2 * 1024 * MIB), 2 * 1024 * MIB),
        (None, "9223372036854771712", None),  # v1 without a limit (2**63 - 1, page-rounded)
        (None, None, None),  # not in a cgroup we can read
        ("garbage", None, None),
        ("0", None, None),
    ],
)
def test_the_container_memory_limit_is_read_from_the_cgroup(
    tmp_path: Path, v2: str | None, v1: str | None, expected: int | None
) -> None:
    assert container_memory_bytes(cgroup(tmp_path, v2, v1)) == expected


def test_the_cap_is_the_lower_of_descriptors_and_memory() -> None:
    assert IN_512_MIB == 11_468
    assert derived_stream_limit(CONTAINER_NOFILE, memory_bytes=512 * MIB) == IN_512_MIB
    # two workers share the pod's memory: each holds half
    assert derived_stream_limit(CONTAINER_NOFILE, memory_bytes=512 * MIB, workers=2) == 4_915
    # descriptors first when they are the tighter bound
    assert derived_stream_limit(20_000, memory_bytes=24 * 1024 * MIB) == 9_872
    # no memory limit: descriptors alone
    assert derived_stream_limit(CONTAINER_NOFILE, memory_bytes=None) == 524_160
    # a memory limit below the idle process: still the floor, not zero
    assert streams_in_memory(32 * MIB) == 0
    assert derived_stream_limit(CONTAINER_NOFILE, memory_bytes=32 * MIB) == 64


def test_a_request_over_the_memory_cap_is_a_503_not_an_oom_kill() -> None:
    slots = StreamSlots(LimitsConfig(), nofile=CONTAINER_NOFILE, memory_bytes=512 * MIB)
    assert slots.limit == IN_512_MIB
    fill_until_refused(slots, Principal("virtual", secret_hash="h-batch"), IN_512_MIB)


def test_a_configured_cap_is_kept_whatever_the_memory() -> None:
    limits = LimitsConfig(max_concurrent_streams=50_000)
    assert StreamSlots(limits, memory_bytes=512 * MIB).limit == 50_000


def test_each_worker_of_an_app_takes_its_share_of_the_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(memory_limit, "CGROUP_ROOT", cgroup(tmp_path, v2=str(512 * MIB)))
    text = "store: {url: 'memory://'}\nserver: {workers: %d}\n"
    one = build_app(parse_config(text % 1, {}))
    two = build_app(parse_config(text % 2, {}))
    assert one[SLOTS].limit == min(IN_512_MIB, derived_stream_limit(memory_bytes=None))
    assert two[SLOTS].limit == min(4_915, derived_stream_limit(memory_bytes=None))
