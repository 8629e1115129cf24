"""The gateway under tracemalloc, with one snapshot of what is allocated where.

    LONG_STREAMS_GATEWAY=$PWD/bench/micro/tracemalloc_gateway.py TRACEMALLOC_AT=62 \\
        TRACEMALLOC_OUT=/tmp/gateway-allocations.txt \\
        python -m bench.micro.long_streams streams --conns 2000 --chunks 40 --interval 1

Starts tracemalloc before anything of the gateway is imported, runs `python -m gateway` with
the arguments it was given (an absolute path: long_streams starts the gateway in its own
temporary directory), and TRACEMALLOC_AT seconds after start writes the allocations
still held, by source line (size, count), to TRACEMALLOC_OUT. The time must fall while the
streams are open: long_streams first runs 50 warm-up streams of the same length, then opens
`--conns` (so with 40 chunks at 1 s, after ~41 s and before ~80 s). Subtract a snapshot of
the idle gateway to get what the streams hold. tracemalloc slows the gateway and adds its
own memory to RSS: read sizes from the file, not RSS.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import time
import tracemalloc

TOP = 80


def snapshot_later(after_s: float, out: str) -> None:
    time.sleep(after_s)
    stats = tracemalloc.take_snapshot().statistics("lineno")
    total = sum(stat.size for stat in stats)
    with open(out, "w") as file:
        file.write(f"total {total / 1e6:.1f} MB in {len(stats)} lines\n")
        for stat in stats[:TOP]:
            frame = stat.traceback[0]
            where = f"{frame.filename}:{frame.lineno}"
            file.write(f"{stat.size / 1e3:10.1f} KB {stat.count:8d} {where}\n")


def main() -> None:
    tracemalloc.start(1)
    after_s = float(os.environ.get("TRACEMALLOC_AT", "60"))
    out = os.environ.get("TRACEMALLOC_OUT", "gateway-allocations.txt")
    threading.Thread(target=snapshot_later, args=(after_s, out), daemon=True).start()
    sys.argv = ["gateway", *sys.argv[1:]]
    runpy.run_module("gateway", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
