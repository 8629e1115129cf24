"""How the serving process sets up Python's cyclic garbage collector.

A gateway holding thousands of streams keeps about a hundred collector-tracked objects per
stream alive for the stream's whole life (its request, coroutines, actor, buffers): over a
million at 10,000 streams. With CPython's default thresholds (700, 10, 10) the young
collections run every few hundred allocations and each full collection walks every one of
those objects, a pause of hundreds of milliseconds that stalls every stream at once (event
loop lag p99 802 ms at 9,000 held streams, `bench/micro/long_streams.py`; docs/performance.md).

So, once the app is built: everything allocated at start-up (modules, config, routing tables,
compiled Structs) is frozen into the permanent generation, which no collection walks again,
and the thresholds are raised so that young collections are rarer and a full one waits for
many more young ones. Memory is not at risk: nearly everything the gateway frees is freed by
reference counting; the collector only finds cycles (a cancelled task and its exception).
"""

from __future__ import annotations

import gc

# allocations minus deallocations before a young collection; young collections before a
# middle one; middle ones before a full one is considered (CPython also waits until the
# objects that survived since the last full collection are a quarter of the old ones)
THRESHOLDS = (20_000, 50, 100)


def tune_collector() -> None:
    """Freeze what start-up allocated and raise the thresholds (see the module docstring)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
