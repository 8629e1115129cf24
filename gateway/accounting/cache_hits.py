"""Response-cache hits on their way to the spend rows (`/admin/spend`): counted in this
process per key and model, and written to the ledger in one call at most a second after the
first hit of a batch (and when the gateway stops, and before /admin/spend answers).

A hit is charged nothing and settles nothing (no budget, no tokens in the tpm window): what
it adds to the ledger is a statistic, so it need not cost a hit a store round trip. A
process killed (SIGKILL) loses the hits of its last second; a ledger that fails loses that
batch (logged), never a request.
"""

from __future__ import annotations

import asyncio
import logging

from gateway.store.kv import StoreError
from gateway.store.ledger import CacheHits
from gateway.store.ledger import Ledger

log = logging.getLogger("gateway.accounting")

FLUSH_AFTER_S = 1.0


class HitTally:
    """This process's hits not yet in the ledger."""

    def __init__(self, ledger: Ledger, flush_after_s: float = FLUSH_AFTER_S) -> None:
        self.ledger = ledger
        self._after_s = flush_after_s
        self._counts: dict[tuple[str, str], list[int]] = {}  # (key id, model) -> [hits, saved]
        self._timer: asyncio.TimerHandle | None = None
        self._flushing: set[asyncio.Task[None]] = set()

    def note(self, key_id: str, model: str, saved_nanos: int) -> None:
        counts = self._counts.get((key_id, model))
        if counts is None:
            counts = self._counts[(key_id, model)] = [0, 0]
        counts[0] += 1
        counts[1] += saved_nanos
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._after_s, self._start)

    def _start(self) -> None:
        self._timer = None
        task = asyncio.get_running_loop().create_task(self.flush())
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    async def flush(self) -> None:
        """Everything counted so far into the ledger (and what is being written, awaited)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        counts, self._counts = self._counts, {}
        pending = [t for t in self._flushing if t is not asyncio.current_task()]
        if counts:
            hits = [
                CacheHits(key_id=key_id, model=model, hits=n, saved_nanos=saved)
                for (key_id, model), (n, saved) in counts.items()
            ]
            try:
                await self.ledger.count_hits(hits)
            except StoreError as exc:
                log.warning(
                    "response cache: %d hits not counted in spend: %s",
                    sum(h.hits for h in hits),
                    type(exc).__name__,
                )
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
