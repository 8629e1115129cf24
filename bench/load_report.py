"""The load benchmark's report: cells that pair a direct and a gateway run, the table, the JSON."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from pathlib import Path

from bench.load_wrk import WrkRun

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"


@dataclass
class Cell:
    """One (mode, connections) pair: the fake upstream hit directly and through the gateway."""

    mode: str
    connections: int
    direct: WrkRun | None = None
    gateway: WrkRun | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """A cell fails when any of its runs failed (errors, non-2xx, no requests)."""
        runs = [r for r in (self.direct, self.gateway) if r is not None]
        return bool(runs) and all(r.ok for r in runs) and not self.problems

    def ratio(self) -> float | None:
        """Gateway RPS / direct RPS."""
        if self.direct is None or self.gateway is None or not self.direct.rps:
            return None
        return self.gateway.rps / self.direct.rps

    def added_ms(self, percentile: str) -> float | None:
        """Gateway latency minus direct latency at p50 or p99, in ms."""
        if self.direct is None or self.gateway is None:
            return None
        attr = f"{percentile}_ms"
        added: float = getattr(self.gateway, attr) - getattr(self.direct, attr)
        return added

    def to_json(self) -> dict[str, object]:
        """JSON-ready dict with the derived numbers."""
        return {
            "mode": self.mode,
            "connections": self.connections,
            "ok": self.ok,
            "problems": self.problems
            + [f"{r.target}: {p}" for r in (self.direct, self.gateway) if r for p in r.problems],
            "rps_ratio": self.ratio(),
            "added_p50_ms": self.added_ms("p50"),
            "added_p99_ms": self.added_ms("p99"),
            "direct": self.direct.to_json() if self.direct else None,
            "gateway": self.gateway.to_json() if self.gateway else None,
        }


HEADERS = (
    "mode",
    "conc",
    "direct RPS",
    "gateway RPS",
    "ratio",
    "direct p50",
    "direct p99",
    "gateway p50",
    "gateway p99",
    "added p50",
    "added p99",
    "ok",
)


def _ms(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    sign = "+" if signed and value >= 0 else ""
    magnitude = abs(value)
    digits = 3 if magnitude < 10 else 2 if magnitude < 100 else 1 if magnitude < 1000 else 0
    return f"{sign}{value:.{digits}f} ms"


def _rps(run: WrkRun | None) -> str:
    return "-" if run is None or not run.requests else f"{run.rps:,.0f}"


def table_rows(cells: list[Cell]) -> list[tuple[str, ...]]:
    """One row of strings per cell, in HEADERS order."""
    rows: list[tuple[str, ...]] = []
    for cell in cells:
        d, g = cell.direct, cell.gateway
        ratio = cell.ratio()
        rows.append(
            (
                cell.mode,
                str(cell.connections),
                _rps(d),
                _rps(g),
                "-" if ratio is None else f"{ratio:.2f}",
                _ms(d.p50_ms if d else None),
                _ms(d.p99_ms if d else None),
                _ms(g.p50_ms if g else None),
                _ms(g.p99_ms if g else None),
                _ms(cell.added_ms("p50"), signed=True),
                _ms(cell.added_ms("p99"), signed=True),
                "yes" if cell.ok else "FAIL",
            )
        )
    return rows


def render_table(cells: list[Cell]) -> str:
    """A Markdown table (aligned, so it reads in a terminal and pastes into docs)."""
    rows = [HEADERS, *table_rows(cells)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADERS))]

    def line(row: tuple[str, ...]) -> str:
        cells_text = [
            text.ljust(width) if i < 2 else text.rjust(width)
            for i, (text, width) in enumerate(zip(row, widths, strict=True))
        ]
        return "| " + " | ".join(cells_text) + " |"

    rule = "| " + " | ".join("-" * w for w in widths) + " |"
    return "\n".join([line(rows[0]), rule, *(line(r) for r in rows[1:])])


def _git(*args: str) -> str | None:
    try:
        result = subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10, check=False
        )
    except OSError:
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def _cpu_model() -> str | None:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_info(wrk: str | None, cpus_allowed: list[int]) -> dict[str, object]:
    """What the numbers depend on: the machine, the interpreter, the code and the tools."""
    status = _git("status", "--porcelain")
    return {
        "nproc": os.cpu_count(),
        "cpus_allowed": cpus_allowed,
        "cpu_model": _cpu_model(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": None if status is None else bool(status),
        "wrk": wrk,
    }


def write_results(report: dict[str, object], started: datetime) -> tuple[Path, Path]:
    """Writes bench/results/load-<UTC timestamp>.json and bench/results/latest.json."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2) + "\n"
    stamped = RESULTS_DIR / f"load-{started.strftime('%Y%m%dT%H%M%SZ')}.json"
    latest = RESULTS_DIR / "latest.json"
    stamped.write_text(text)
    latest.write_text(text)
    return stamped, latest
