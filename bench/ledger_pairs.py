"""Timed loop: admit + settle pairs per second on one accounting store, the two store calls
a request with a virtual key makes, from N concurrent tasks (a gateway's requests in flight).

    python -m bench.ledger_pairs [--store memory|sqlite] [--seconds 3] [--concurrency 1,16,64]

One key with a budget, rpm and tpm far above the load (so every admission passes and writes
what a real one writes); sqlite in a temp dir. Prints one line per concurrency: pairs per
second and the mean time a pair took. See docs/accounting.md ("sqlite: group commit").
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time

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


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.ledger_pairs", description=__doc__)
    parser.add_argument("--store", choices=["memory", "sqlite"], default="sqlite")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", default="1,16,64")
    args = parser.parse_args()
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        with tempfile.TemporaryDirectory(prefix="ledger-pairs-") as tmp:
            url = "memory://" if args.store == "memory" else f"sqlite:///{tmp}/ledger.db"
            rate, per_pair = asyncio.run(measure(url, concurrency, args.seconds))
        print(
            f"{args.store:<7} c={concurrency:<3} {rate:>8,.0f} pairs/s"
            f"  {per_pair * 1e6:>7,.0f} us per pair"
        )


if __name__ == "__main__":
    main()
