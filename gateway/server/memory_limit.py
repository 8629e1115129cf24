"""The memory this process may use, as its container sets it (the cgroup's limit), for the
concurrency cap `server/limits.py` derives when `max_concurrent_streams` is not set.

A pod's memory limit is met long before its descriptor limit (a container's `nofile` is
often 1,048,576, room for ~524,000 streams; 512 MiB holds ~11,000): past it the kernel
kills the process, and every stream it held ends at once. So the cap also counts what the
memory limit holds, and a request over it is a 503 with Retry-After that a load balancer
can move on from instead.

The figures are measured (docs/performance.md, "Targets on this shape"): ~50 MiB for an idle
process, ~35 KiB per open stream (36.5 at 2,000 streams of 20 chunks, 34.5 at 10,000 held);
`BASE_BYTES` and `BYTES_PER_STREAM` leave a margin over both.
"""

from __future__ import annotations

from pathlib import Path

BASE_BYTES = 64 << 20
BYTES_PER_STREAM = 40 << 10
# a cgroup without a limit reports "max" (v2) or a page-rounded 2**63 - 1 (v1)
_NO_LIMIT_FROM = 1 << 60

CGROUP_ROOT = Path("/sys/fs/cgroup")


def container_memory_bytes(root: Path | None = None) -> int | None:
    """The memory limit of this process's cgroup (v2 `memory.max`, else v1
    `memory/memory.limit_in_bytes`, under `root`, by default CGROUP_ROOT); None when there
    is none or it cannot be read."""
    root = CGROUP_ROOT if root is None else root
    for path in (root / "memory.max", root / "memory" / "memory.limit_in_bytes"):
        try:
            text = path.read_text().strip()
        except OSError:
            continue
        if text == "max":
            return None
        try:
            value = int(text)
        except ValueError:
            continue
        return value if 0 < value < _NO_LIMIT_FROM else None
    return None


def streams_in_memory(memory_bytes: int, workers: int = 1) -> int:
    """The streams one of `workers` processes sharing `memory_bytes` can hold."""
    share = memory_bytes // max(1, workers)
    return max(0, (share - BASE_BYTES) // BYTES_PER_STREAM)
