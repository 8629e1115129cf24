"""The traffic benchmark's figures and table, from the raw results of its cells (cell.py).

Rounds of one (scenario, cell, target) are merged first: histograms added, counts summed, peak
RSS the largest. Then per row: RPS (answers completed right within the send window / window;
`-` for held streams, one request per connection), errors by kind, latency and TTFB p50/p99,
the per-chunk added delay p50/p99/max and its excess over `direct` in the same cell ("+delay",
what the gateway adds), inter-arrival p50/p99/max, peak RSS, RSS per open stream ((peak - idle)
/ connections), CPU microseconds per relayed chunk (the target tree's CPU time / chunks the
client received), probe lag p50/p99/max, and the upstream's pacing lateness p99 (its own
ceiling check: when it is high, the upstream, not the target, limited the cell), and how busy
each CPU was during the cell, whoever used it (work of others on the machine shows there).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.traffic.hist import Histogram
from bench.traffic.hist import merged

HISTS = ("latency", "ttfb", "delay", "gap")


def _merge_rounds(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    out: dict[str, Any] = {key: first[key] for key in ("target", "scenario", "cell", "conns")}
    hists: dict[str, list[Histogram]] = {name: [] for name in (*HISTS, "probe", "lateness")}
    errors: Counter[str] = Counter()
    totals = Counter[str]()
    for run in runs:
        totals["duration_s"] += run["duration_s"]
        totals["cpu_s"] += run["cpu_s"]
        for proc in run.get("client") or []:
            for name in HISTS:
                if name in proc:
                    hists[name].append(Histogram.from_dict(proc[name]))
            errors.update(proc.get("errors", {}))
            for key in ("ok", "ok_in_window", "chunks"):
                totals[key] += proc.get(key, 0)
        if run.get("client") is None:
            errors["client_failed"] += 1
        probe = run.get("probe")
        if probe:
            hists["probe"].append(Histogram.from_dict(probe["latency"]))
            totals["probe_errors"] += probe["errors"]
        hists["lateness"].append(Histogram.from_dict(run["upstream"]["lateness"]))
        totals["upstream_chunks"] += run["upstream"]["chunks_sent"]
    out["hists"] = {name: merged(parts) for name, parts in hists.items()}
    out["has_probe"] = bool(hists["probe"])
    out["errors"] = dict(errors)
    out.update(totals)
    out["peak_rss_kb"] = max(run["peak_rss_kb"] for run in runs)
    out["idle_rss_kb"] = min(run["idle_rss_kb"] for run in runs)
    out["one_shot"] = first.get("one_shot", False)
    busy: Counter[str] = Counter()
    for run in runs:
        busy.update(run.get("cpu_busy_s", {}))
    out["cpu_busy_s"] = dict(busy)
    out["elapsed_s"] = sum(run.get("elapsed_s", 0.0) for run in runs)
    return out


def _ms(hist: Histogram, pct: float) -> float | None:
    value = hist.percentile(pct)
    return None if value is None else value / 1000.0


def figures(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row of figures per (scenario, cell, target), in the order first measured."""
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["scenario"], run["cell"], run["target"]), []).append(run)
    rows = []
    for key, group in groups.items():
        merged_run = _merge_rounds(group)
        h = merged_run["hists"]
        row: dict[str, Any] = {"scenario": key[0], "cell": key[1], "target": key[2]}
        row["conns"] = merged_run["conns"]
        window = merged_run["duration_s"]
        row["rps"] = None if merged_run["one_shot"] else merged_run["ok_in_window"] / window
        row["ok"] = merged_run["ok"]
        row["errors"] = merged_run["errors"]
        row["error_total"] = sum(merged_run["errors"].values())
        for name in HISTS:
            row[name] = h[name].summary_ms()
        row["chunks"] = merged_run["chunks"]
        row["chunks_per_s"] = merged_run["chunks"] / window if window else None
        row["peak_rss_mib"] = merged_run["peak_rss_kb"] / 1024
        grown = merged_run["peak_rss_kb"] - merged_run["idle_rss_kb"]
        row["rss_per_stream_kib"] = grown / merged_run["conns"] if merged_run["conns"] else None
        chunks = merged_run["chunks"]
        row["cpu_s"] = merged_run["cpu_s"]
        row["cpu_us_per_chunk"] = merged_run["cpu_s"] * 1e6 / chunks if chunks else None
        row["probe"] = h["probe"].summary_ms() if merged_run["has_probe"] else None
        row["probe_errors"] = merged_run.get("probe_errors", 0)
        row["upstream_lateness"] = h["lateness"].summary_ms()
        row["upstream_chunks"] = merged_run["upstream_chunks"]
        elapsed = merged_run["elapsed_s"]
        row["cpu_busy_pct"] = (
            {cpu: 100.0 * seconds / elapsed for cpu, seconds in merged_run["cpu_busy_s"].items()}
            if elapsed
            else {}
        )
        rows.append(row)
    direct = {(r["scenario"], r["cell"]): r for r in rows if r["target"] == "direct"}
    for row in rows:
        base = direct.get((row["scenario"], row["cell"]))
        for name, added in (("delay", "added_delay"), ("latency", "added_latency")):
            row[added] = None
            if base is not None and row["target"] != "direct":
                row[added] = {
                    pct: _minus(row[name][pct], base[name][pct]) for pct in ("p50", "p99")
                }
    return rows


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def fmt(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    sign = "+" if signed and value >= 0 else ""
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{sign}{value:,.0f}"
    if magnitude >= 100:
        return f"{sign}{value:.0f}"
    if magnitude >= 10:
        return f"{sign}{value:.1f}"
    return f"{sign}{value:.2f}"


def _triple(summary: dict[str, Any] | None, keys: tuple[str, ...]) -> str:
    if not summary or not summary.get("count"):
        return "-"
    return " / ".join(fmt(summary[key]) for key in keys)


def _errors(row: dict[str, Any]) -> str:
    if not row["error_total"]:
        return "0"
    kinds = sorted(row["errors"].items(), key=lambda item: -item[1])
    listed = ", ".join(f"{kind} {n}" for kind, n in kinds[:3])
    more = f", +{len(kinds) - 3} kinds" if len(kinds) > 3 else ""
    return f"{row['error_total']} ({listed}{more})"


COLUMNS = (
    "scenario",
    "cell",
    "target",
    "RPS",
    "ok",
    "errors",
    "lat p50 / p99 ms",
    "+lat p50 / p99",
    "TTFB p50 / p99",
    "delay p50 / p99 / max",
    "+delay p50 / p99",
    "gap p50 / p99 / max",
    "chunks/s",
    "peak MiB",
    "KiB/stream",
    "CPU µs/chunk",
    "probe p50 / p99 / max",
    "up late p99",
    "CPU0 / CPU1 busy %",
)


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    two = ("p50", "p99")
    for row in rows:
        added = [row["added_latency"], row["added_delay"]]
        added_text = [" / ".join(fmt(a[k], signed=True) for k in two) if a else "-" for a in added]
        cells = [
            row["scenario"],
            row["cell"],
            row["target"],
            fmt(row["rps"]),
            str(row["ok"]),
            _errors(row),
            _triple(row["latency"], two),
            added_text[0],
            _triple(row["ttfb"], two),
            _triple(row["delay"], ("p50", "p99", "max")),
            added_text[1],
            _triple(row["gap"], ("p50", "p99", "max")),
            fmt(row["chunks_per_s"]),
            fmt(row["peak_rss_mib"]),
            fmt(row["rss_per_stream_kib"]),
            fmt(row["cpu_us_per_chunk"]),
            _triple(row["probe"], ("p50", "p99", "max")),
            fmt(row["upstream_lateness"]["p99"]),
            " / ".join(f"{row['cpu_busy_pct'].get(cpu, 0):.0f}" for cpu in ("0", "1")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ceiling(rows: list[dict[str, Any]], limit_ms: float) -> dict[str, Any]:
    """The calibration's verdict: the highest concurrency (and chunk rate) at which `direct`
    had no errors, upstream lateness p99 and client delay p99 under `limit_ms`."""
    best: dict[str, Any] = {"limit_ms": limit_ms, "conns": None, "chunks_per_s": None}
    for row in sorted(rows, key=lambda r: r["conns"]):
        late = row["upstream_lateness"]["p99"]
        delay = row["delay"]["p99"]
        good = not row["error_total"] and late is not None and delay is not None
        row["within_ceiling"] = bool(good and late < limit_ms and delay < limit_ms)
        if row["within_ceiling"]:
            best.update(conns=row["conns"], chunks_per_s=row["chunks_per_s"])
    best["cells"] = [
        {key: row[key] for key in ("conns", "chunks_per_s", "within_ceiling", "error_total")}
        | {"lateness_p99": row["upstream_lateness"]["p99"], "delay_p99": row["delay"]["p99"]}
        for row in rows
    ]
    return best
