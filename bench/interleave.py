"""Interleaved before/after run of `make bench`'s load scenario: a base revision against the
working tree, alternately, on the same machine, in one run.

    python -m bench.interleave --base <git-rev> [--rounds N] [--max-total S] [-- <bench.load args>]

Checks the base revision out into a temporary git worktree (detached; removed at the end) and
runs `python -m bench.load` there and here with this same interpreter (the project's .venv),
PYTHONPATH pointed at each tree, so nothing is installed twice: the base's gateway and bench
code, the head's dependencies. Round 1 runs base then head, round 2 head then base, and so on,
so that a machine slowly getting faster or slower biases neither side. Each run is bounded by
a subprocess timeout and the whole by --max-total (no new run starts after it). "head" is the
working tree as it is, uncommitted changes included.

Prints, per metric of every (mode, connections) cell, the median over the rounds of base and
of head, head/base, and each side's spread ((max - min) / median over its rounds): a ratio
inside the spreads is noise. Writes everything to bench/results/interleave-<UTC>.json.
Exit status: 0 every run succeeded, 1 some run failed or the cap cut the rounds short, 2 setup.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
MAX_ROUNDS = 10
RUN_TIMEOUT_S = 900  # one bench.load run; the default scenario takes about 80 s
RESULTS_LINE = re.compile(r"^results: (\S+\.json)", re.MULTILINE)

# (key, label, lower is better): what is compared, per cell
METRICS = (
    ("gateway_rps", "gateway RPS", False),
    ("gateway_p50_ms", "gateway p50 ms", True),
    ("gateway_p99_ms", "gateway p99 ms", True),
    ("added_p50_ms", "added p50 ms", True),
    ("cpu_us_per_request", "gateway CPU us/req", True),
    ("direct_rps", "direct RPS (machine)", False),
)


def log(message: str) -> None:
    print(f"[bench.interleave {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def git(*args: str, cwd: Path = REPO) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip()


def cell_metrics(report: dict[str, object]) -> dict[str, dict[str, float]]:
    """bench.load's JSON -> {"non-stream c=16": {metric: value}} for the cells that passed."""
    out: dict[str, dict[str, float]] = {}
    cells = report.get("cells")
    assert isinstance(cells, list)
    for cell in cells:
        gateway, direct = cell.get("gateway"), cell.get("direct")
        if not cell.get("ok") or not gateway or not direct:
            continue
        rps = float(gateway["rps"])
        cpu_share = float(gateway.get("cpu", {}).get("gateway", 0.0)) / 100
        out[f"{cell['mode']} c={cell['connections']}"] = {
            "gateway_rps": rps,
            "gateway_p50_ms": float(gateway["p50_ms"]),
            "gateway_p99_ms": float(gateway["p99_ms"]),
            "added_p50_ms": float(cell["added_p50_ms"]),
            "cpu_us_per_request": cpu_share / rps * 1e6 if rps else 0.0,
            "direct_rps": float(direct["rps"]),
        }
    return out


def run_load(side: str, tree: Path, load_args: list[str], log_dir: Path) -> dict[str, object]:
    """One bench.load run in `tree`; returns its JSON report (raises on any failure)."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable, "-m", "bench.load", *load_args]
    started = time.monotonic()
    log(f"{side}: {' '.join(argv[1:])} in {tree}")
    done = subprocess.run(
        argv, cwd=tree, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    elapsed = time.monotonic() - started
    (log_dir / f"{side}-{int(time.time())}.log").write_text(done.stdout + done.stderr)
    found = RESULTS_LINE.search(done.stdout)
    if done.returncode != 0 or found is None:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-15:])
        raise RuntimeError(f"{side}: bench.load exited {done.returncode}\n{tail}")
    report: dict[str, object] = json.loads((tree / found.group(1)).read_text())
    report["_elapsed_s"] = round(elapsed, 1)
    log(f"{side}: done in {elapsed:.0f}s")
    return report


def spread(values: list[float]) -> float | None:
    """(max - min) / median, in percent; None with fewer than two values."""
    if len(values) < 2:
        return None
    mid = statistics.median(values)
    return (max(values) - min(values)) / mid * 100 if mid else None


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3f}"


def render(runs: dict[str, list[dict[str, dict[str, float]]]]) -> str:
    """The Markdown table: one row per cell and metric."""
    lines = [
        "| cell | metric | base median | head median | head/base | base spread | head spread |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    cells = [c for c in runs["base"][0] if all(c in r for side in runs.values() for r in side)]
    for cell in cells:
        for key, label, _ in METRICS:
            values = {side: [r[cell][key] for r in rs] for side, rs in runs.items()}
            base, head = (statistics.median(values[s]) for s in ("base", "head"))
            ratio = f"{head / base:.3f}" if base else "-"
            lines.append(
                f"| {cell} | {label} | {_num(base)} | {_num(head)} | {ratio} | "
                f"{_pct(spread(values['base']))} | {_pct(spread(values['head']))} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    load_args: list[str] = []
    if "--" in args:
        at = args.index("--")
        args, load_args = args[:at], args[at + 1 :]
    parser = argparse.ArgumentParser(
        prog="python -m bench.interleave",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base", required=True, help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=3, help=f"1..{MAX_ROUNDS} (default 3)")
    parser.add_argument(
        "--max-total", type=int, default=3600, help="no run starts after this many seconds"
    )
    opts = parser.parse_args(args)
    if not 1 <= opts.rounds <= MAX_ROUNDS:
        parser.error(f"--rounds must be between 1 and {MAX_ROUNDS}")
    try:
        base_commit = git("rev-parse", "--verify", f"{opts.base}^{{commit}}")
        head_commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    except RuntimeError as error:
        print(f"bench.interleave: {error}", file=sys.stderr)
        return 2
    started = datetime.now(UTC)
    t0 = time.monotonic()
    runs: dict[str, list[dict[str, dict[str, float]]]] = {"base": [], "head": []}
    reports: list[dict[str, object]] = []
    failed: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench-interleave-") as tmp:
        worktree = Path(tmp) / "base"
        try:
            git("worktree", "add", "--detach", str(worktree), base_commit)
        except RuntimeError as error:
            print(f"bench.interleave: {error}", file=sys.stderr)
            return 2
        try:
            trees = {"base": worktree, "head": REPO}
            # the import check: each side must load its own tree's gateway, not the other's
            for side, tree in trees.items():
                where = subprocess.run(
                    [sys.executable, "-c", "import gateway, bench.load; print(gateway.__file__)"],
                    cwd=tree,
                    env=dict(os.environ, PYTHONPATH=str(tree)),
                    capture_output=True,
                    text=True,
                    timeout=60,
                    check=False,
                )
                if where.returncode != 0 or not where.stdout.strip().startswith(str(tree)):
                    print(
                        f"bench.interleave: {side} does not import from {tree}: "
                        f"{where.stdout.strip()} {where.stderr.strip()[-500:]}",
                        file=sys.stderr,
                    )
                    return 2
            for round_no in range(opts.rounds):
                order = ("base", "head") if round_no % 2 == 0 else ("head", "base")
                for side in order:
                    if time.monotonic() - t0 > opts.max_total:
                        failed.append(f"--max-total {opts.max_total}s reached")
                        break
                    try:
                        report = run_load(side, trees[side], load_args, Path(tmp))
                    except (RuntimeError, subprocess.TimeoutExpired) as error:
                        failed.append(str(error))
                        log(str(error))
                        continue
                    report["_side"], report["_round"] = side, round_no + 1
                    reports.append(report)
                    runs[side].append(cell_metrics(report))
                if failed and failed[-1].startswith("--max-total"):
                    break
        finally:
            subprocess.run(
                ["git", "worktree", "remove", "--force", str(worktree)],
                cwd=REPO,
                capture_output=True,
                timeout=120,
                check=False,
            )
            subprocess.run(
                ["git", "worktree", "prune"], cwd=REPO, capture_output=True, timeout=60, check=False
            )
    elapsed = time.monotonic() - t0
    per_run = [r["_elapsed_s"] for r in reports]
    changes = " + uncommitted changes" if dirty else ""
    header = (
        f"base {base_commit[:10]} vs head {head_commit[:10]}{changes}"
        f"; {len(runs['base'])} base and {len(runs['head'])} head runs of bench.load "
        f"{' '.join(load_args) or '(defaults)'}, interleaved; {elapsed:.0f}s in all"
        f" ({', '.join(f'{s:.0f}s' for s in per_run)} per run)"
    )
    table = render(runs) if runs["base"] and runs["head"] else "(no comparison: a side has no run)"
    print(header + "\n\n" + table)
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"interleave-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    out.write_text(
        json.dumps(
            {
                "benchmark": "bench.interleave",
                "started_at": started.isoformat(timespec="seconds"),
                "base": base_commit,
                "head": head_commit,
                "head_dirty": dirty,
                "load_args": load_args,
                "rounds": opts.rounds,
                "elapsed_s": round(elapsed, 1),
                "failed": failed,
                "summary": header,
                "table": table,
                "runs": runs,
                "reports": reports,
            },
            indent=1,
        )
    )
    print(f"\nresults: {out.relative_to(REPO)}")
    for problem in failed:
        print(f"FAILED: {problem.splitlines()[0]}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
