"""`make rig`: run the rig once and print its summary; exit 1 when a property did not hold."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import sys

from deploy.rig.phases import run_rig
from deploy.rig.report import FULL, SMALL


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m deploy.rig", description=__doc__)
    parser.add_argument("--small", action="store_true", help="the bounded run of the tests")
    parser.add_argument("--load-s", type=float, help="seconds of each steady load")
    parser.add_argument("--concurrency", type=int, help="requests in flight in the loads")
    args = parser.parse_args(argv)
    settings = SMALL if args.small else FULL
    if args.load_s is not None:
        settings = dataclasses.replace(settings, load_s=args.load_s)
    if args.concurrency is not None:
        settings = dataclasses.replace(settings, concurrency=args.concurrency)
    report = asyncio.run(run_rig(settings))
    command = "python -m deploy.rig " + " ".join(argv if argv is not None else sys.argv[1:])
    print(report.summary(command.strip()))
    return 1 if report.problems() else 0


if __name__ == "__main__":
    sys.exit(main())
