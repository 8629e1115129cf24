"""The scenarios of the traffic benchmark: each one upstream shape and a few cells.

A *cell* is one load run against one target: connections, request (prompt size, stream or
not, tools), how long, and how many chunks a right answer has. Cells of a scenario share the
upstream's shape (chunks, interval, chunk size), so the orchestrator starts the upstream once
per scenario. Durations scale with `--duration`; the drain bound is the stream's own length plus
a margin, so a request started just before the end can finish.
"""

from __future__ import annotations

from dataclasses import dataclass

SCENARIO_NAMES = ("streams", "long", "held", "prompt", "tools")
DRAIN_MARGIN_S = 5.0
KB = 1024


@dataclass(frozen=True)
class Shape:
    chunks: int
    interval_ms: float
    size: int

    def seconds(self) -> float:
        return (self.chunks - 1) * self.interval_ms / 1000.0


@dataclass(frozen=True)
class Cell:
    scenario: str
    label: str  # what differs between the scenario's cells, e.g. "c=1000" or "100KB stream"
    conns: int
    duration_s: float
    drain_s: float
    stream: bool = True
    tools: bool = False
    prompt_bytes: int = 1 * KB
    one_shot: bool = False
    expect_chunks: int = 0


@dataclass(frozen=True)
class Scenario:
    name: str
    shape: Shape
    cells: tuple[Cell, ...]


def _drain(shape: Shape) -> float:
    return shape.seconds() + DRAIN_MARGIN_S


def build(name: str, duration_s: float, quick: bool = False) -> Scenario:
    """Scenario `name` at `--duration`; `quick` shrinks counts to a smoke test's."""
    if name == "streams":
        shape = Shape(10, 50.0, 20) if quick else Shape(20, 100.0, 20)
        conns = 50 if quick else 2000
        chunks = shape.chunks
        cell = Cell(name, f"c={conns}", conns, duration_s, _drain(shape), expect_chunks=chunks)
        return Scenario(name, shape, (cell,))
    if name == "long":
        shape = Shape(200, 20.0, 20)
        if quick:
            shape = Shape(40, 20.0, 20)
        counts = (20,) if quick else (1000, 5000)
        cells = tuple(
            Cell(name, f"c={n}", n, duration_s, _drain(shape), expect_chunks=shape.chunks)
            for n in counts
        )
        return Scenario(name, shape, cells)
    if name == "held":
        # streams longer than the send window: each connection holds one for the whole cell
        shape = Shape(3, 500.0, 20) if quick else Shape(30, 1000.0, 20)
        conns = 100 if quick else 10000
        window = min(duration_s, 1.0 if quick else 6.0)  # room to open every connection
        cell = Cell(
            name,
            f"c={conns}",
            conns,
            window,
            _drain(shape),
            one_shot=True,
            expect_chunks=shape.chunks,
        )
        return Scenario(name, shape, (cell,))
    if name == "prompt":
        shape = Shape(5, 0.0, 20)  # unpaced: the answer is quick, the body is the cost
        sizes = (100 * KB,) if quick else (1 * KB, 100 * KB, 1024 * KB)
        cell_s = 1.0 if quick else max(1.0, duration_s / 4)
        cells = []
        for size in sizes:
            for stream in (False, True):
                label = f"{size // KB}KB {'stream' if stream else 'non-stream'}"
                expect = 5 if stream else 1
                cells.append(
                    Cell(
                        name,
                        label,
                        1,
                        cell_s,
                        DRAIN_MARGIN_S,
                        stream=stream,
                        prompt_bytes=size,
                        expect_chunks=expect,
                    )
                )
        return Scenario(name, shape, tuple(cells))
    if name == "tools":
        shape = Shape(10, 50.0, 20) if quick else Shape(20, 100.0, 20)
        conns = 30 if quick else 1000
        chunks = shape.chunks
        cell = Cell(
            name, f"c={conns}", conns, duration_s, _drain(shape), tools=True, expect_chunks=chunks
        )
        return Scenario(name, shape, (cell,))
    raise SystemExit(f"unknown scenario {name!r} (one of {', '.join(SCENARIO_NAMES)})")


def calibration(duration_s: float, counts: tuple[int, ...]) -> Scenario:
    """`direct` at rising concurrency on the `streams` shape: the harness's own ceiling."""
    shape = Shape(20, 100.0, 20)
    cells = tuple(
        Cell("calibrate", f"c={n}", n, duration_s, _drain(shape), expect_chunks=20) for n in counts
    )
    return Scenario("calibrate", shape, cells)
