"""The listening socket's accept queue is LISTEN_BACKLOG deep once the site has started
(server/runner.py): aiohttp's SockSite listens again with its own default (128) unless told,
and at 128 a burst of a few thousand connections overflows the queue and the clients' SYNs
are retried seconds later. The depth is read back from the kernel with `ss` (iproute2)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from gateway.server.runner import LISTEN_BACKLOG
from tests.limits.served import served_gateway


def listen_queue_depth(port: int) -> int:
    """The maximum accept queue of the socket listening on 127.0.0.1:`port` (`ss -ltn`'s
    Send-Q for a listening socket)."""
    ss = shutil.which("ss")
    assert ss, "ss (iproute2) is missing: run tests/install_deps.sh"
    out = subprocess.run(
        [ss, "-ltnH", f"sport = :{port}"], capture_output=True, text=True, check=True
    ).stdout
    rows = [line.split() for line in out.splitlines() if line.strip()]
    assert len(rows) == 1, out
    return int(rows[0][2])


SOMAXCONN = int(Path("/proc/sys/net/core/somaxconn").read_text())  # the kernel's cap


async def test_the_accept_queue_is_listen_backlog_deep() -> None:
    async with served_gateway("store: {url: 'memory://'}\n") as served:
        port = int(served.url.rsplit(":", 1)[1])
        assert listen_queue_depth(port) == min(LISTEN_BACKLOG, SOMAXCONN)
