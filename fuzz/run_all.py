"""Run every atheris harness for a bounded time, one after another, and report executions.

    python -m fuzz.run_all --seconds 60            # `make fuzz`
    python -m fuzz.run_all --seconds 2 sse http1   # some targets only
    python -m fuzz.run_all --jobs 4                # four harnesses at a time

Each harness runs in its own process (libFuzzer owns the process: a finding ends it). The
table gives, per target, the executions, their rate, the corpus entries it added, the peak
RSS and the verdict; the exit status is non-zero if any harness found something (the
crashing input is in build/fuzz/<name>/).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
HARNESSES = sorted(p.stem.removeprefix("fuzz_") for p in Path(__file__).parent.glob("fuzz_*.py"))
_STAT = re.compile(r"^stat::(\w+):\s+(\d+)", re.MULTILINE)


class Outcome:
    """One harness run: its verdict and libFuzzer's final statistics."""

    def __init__(self, name: str, returncode: int, output: str, seconds: float) -> None:
        self.name = name
        self.returncode = returncode
        self.output = output
        self.seconds = seconds
        self.stats = {k: int(v) for k, v in _STAT.findall(output)}

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and "number_of_executed_units" in self.stats

    @property
    def executions(self) -> int:
        return self.stats.get("number_of_executed_units", 0)


def run(name: str, seconds: int, runs: int | None = None, corpus: Path | None = None) -> Outcome:
    """One harness for at most `seconds` (and at most `runs` inputs when given), on
    `corpus` (default: build/fuzz/<name>/corpus, kept from run to run)."""
    command = [
        sys.executable,
        "-m",
        f"fuzz.fuzz_{name}",
        f"-max_total_time={seconds}",
        "-print_final_stats=1",
    ]
    if runs is not None:
        command.append(f"-runs={runs}")
    if corpus is not None:
        command.append(str(corpus))
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=REPO,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=seconds + 120,  # startup and the final corpus pass; a hang is a finding
        check=False,
    )
    return Outcome(name, done.returncode, done.stderr + done.stdout, time.monotonic() - started)


def run_many(
    names: list[str],
    seconds: int,
    runs: int | None = None,
    corpus_root: Path | None = None,
    jobs: int = 1,
) -> list[Outcome]:
    """Several harnesses, `jobs` at a time, each in its own process; in `names` order."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        return list(
            pool.map(
                lambda name: run(name, seconds, runs, corpus_root / name if corpus_root else None),
                names,
            )
        )


def report(outcomes: list[Outcome]) -> str:
    lines = [f"{'target':<20}{'executions':>12}{'exec/s':>9}{'new':>6}{'rss MB':>8}  verdict"]
    for o in outcomes:
        rate = o.stats.get("average_exec_per_sec", 0)
        new = o.stats.get("new_units_added", 0)
        rss = o.stats.get("peak_rss_mb", 0)
        verdict = "ok" if o.ok else f"FINDING (exit {o.returncode})"
        lines.append(f"{o.name:<20}{o.executions:>12}{rate:>9}{new:>6}{rss:>8}  {verdict}")
    total = sum(o.executions for o in outcomes)
    lines.append(f"{'total':<20}{total:>12}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seconds", type=int, default=60, help="per target")
    parser.add_argument("--runs", type=int, default=None, help="at most this many inputs")
    parser.add_argument("--jobs", type=int, default=1, help="harnesses run at once")
    parser.add_argument("targets", nargs="*", default=HARNESSES)
    args = parser.parse_args()
    outcomes = run_many(args.targets, args.seconds, args.runs, jobs=args.jobs)
    for outcome in outcomes:
        if not outcome.ok:
            print(f"--- {outcome.name} ---\n{outcome.output[-4000:]}", flush=True)
    print(report(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
