"""Read a profile of the gateway (see profile_gateway.py): its CPU cost by layer.

    python -m bench.micro.profile_report DIR/stream.txt  [--us-per-request 370] [--top 25]
    python -m bench.micro.profile_report DIR/stream.prof [--us-per-request 370] [--top 25]

A `.prof` file is a cProfile dump. pstats keeps no stacks, only caller -> callee edges, so
each function's own time is charged gprof-style: to its layer if it has one, otherwise to its
callers in proportion to the time each edge took, recursively. The time of Runner.run itself
is uvloop's C code (polling, socket IO, callback dispatch). Coroutines count the time of each
resumption, not the time they were suspended. Everything else below is about py-spy.

py-spy's raw format is one line per distinct stack, `frame;frame;...;frame COUNT`, root first,
each frame `function (file:line)`. Every sample is charged to one layer: the layer of the
innermost frame that belongs to one (so `aiohttp/http_writer.py` under `web_response.py` is a
response write, under `client_reqrep.py` an upstream request write). A gateway frame whose
line calls msgspec is charged to msgspec (without `--native` a C call shows as its caller's
line). Samples with no Python frame under the event loop are uvloop's own C code: polling,
socket reads and writes, callback dispatch.

With `--us-per-request` (the gateway's CPU microseconds per request from an unprofiled run)
the shares are also printed as microseconds per request. Also prints the top functions by
inclusive samples (a function counted once per sample it is on the stack of).
"""

from __future__ import annotations

import argparse
import pstats
import re
from collections import Counter
from functools import cache
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]+)(?::(?P<line>\d+))?\)$")
_MSGSPEC_CALL = re.compile(
    r"(_decoder|_json|encoder)\.(decode|encode)\(|msgspec\.(convert|json\.(de|en)code)\("
)

_ENTRY = ("gateway/__main__.py", "gateway/cli.py", "gateway/server/runner.py")
AIOHTTP_SERVER = (
    "aiohttp/web_protocol.py",
    "aiohttp/web_request.py",
    "aiohttp/web_app.py",
    "aiohttp/web_middlewares.py",
    "aiohttp/web_urldispatcher.py",
    "aiohttp/web_server.py",
    "aiohttp/http_parser.py",
    "aiohttp/_http_parser",
)
AIOHTTP_CLIENT = (
    "aiohttp/client.py",
    "aiohttp/client_reqrep.py",
    "aiohttp/client_proto.py",
    "aiohttp/connector.py",
    "aiohttp/cookiejar.py",
    "aiohttp/tracing.py",
)
LAYERS = (
    "aiohttp server: request parse, dispatch, handler task",
    "our code: server handler (gateway/server)",
    "our code: actor + transport (gateway/stream/actor, transport)",
    "our code: provider adapter (gateway/providers, not msgspec)",
    "our code: other gateway",
    "asyncio.timeout (actor deadlines)",
    "aiohttp client: session.request, pool, response",
    "msgspec decode/encode (called from gateway)",
    "SSE decode (gateway/framing/sse.py)",
    "accumulator (gateway/stream/accumulator.py)",
    "outbound chunk framing (chat_outbound.py, not msgspec)",
    "response writes (aiohttp web_response, StreamResponse.write)",
    "event loop C code (uvloop: poll, socket IO, callbacks)",
)


@cache
def _source_line(file: str, line: int) -> str:
    path = REPO / file
    try:
        return path.read_text().splitlines()[line - 1]
    except (OSError, IndexError):
        return ""


@cache
def layer_of(frame: str) -> str | None:
    m = _FRAME.match(frame)
    if m is None:
        return None
    file = m.group("file")
    line = int(m.group("line") or 0)
    if "msgspec" in file:
        return LAYERS[7]
    if file in _ENTRY:
        return None  # the process's entry frames, under every sample
    if file.startswith("gateway/"):
        if line and _MSGSPEC_CALL.search(_source_line(file, line)):
            return LAYERS[7]
        if file == "gateway/framing/sse.py":
            return LAYERS[8]
        if file == "gateway/stream/accumulator.py":
            return LAYERS[9]
        if file == "gateway/stream/chat_outbound.py":
            return LAYERS[10]
        if file.startswith("gateway/server/"):
            return LAYERS[1]
        if file in ("gateway/stream/actor.py", "gateway/upstream/transport.py"):
            return LAYERS[2]
        if file.startswith("gateway/providers/"):
            return LAYERS[3]
        return LAYERS[4]
    if file == "asyncio/timeouts.py":
        return LAYERS[5]
    if file == "aiohttp/web_response.py":
        return LAYERS[11]
    if file.startswith(AIOHTTP_CLIENT):
        return LAYERS[6]
    if file.startswith(AIOHTTP_SERVER):
        return LAYERS[0]
    return None


def _relative(file: str) -> str:
    """An absolute path as py-spy shows it: repo-relative or from the package's folder."""
    if file.startswith(str(REPO) + "/") and "/site-packages/" not in file:
        return file[len(str(REPO)) + 1 :]
    if "/site-packages/" in file:
        return file.split("/site-packages/", 1)[1]
    if "/lib/python3" in file:
        return file.split("/lib/python3", 1)[1].split("/", 1)[1]
    return file


Func = tuple[str, int, str]


def layer_of_func(func: Func) -> str | None:
    file, line, name = func
    if file == "~":
        return LAYERS[7] if "msgspec" in name else None
    rel = _relative(file)
    if rel.startswith("gateway/"):
        return layer_of(f"{name} ({rel})")  # the whole function, not one line of it
    return layer_of(f"{name} ({rel}:{line})")


def prof_report(path: Path, us_per_request: float | None, top: int) -> str:
    stats: dict[Func, Any] = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    share: dict[Func, dict[str, float]] = {}
    loop = LAYERS[12]

    visiting: set[Func] = set()

    def shares(func: Func) -> dict[str, float]:
        cached = share.get(func)
        if cached is not None:
            return cached
        layer = layer_of_func(func)
        if layer is not None:
            result = {layer: 1.0}
        else:
            visiting.add(func)  # a call cycle is cut where it closes
            callers = stats[func][4]
            weights = {c: e[3] for c, e in callers.items() if c not in visiting and c in stats}
            total = sum(weights.values())
            result = {}
            for caller, weight in weights.items():
                if total > 0:
                    for lay, frac in shares(caller).items():
                        result[lay] = result.get(lay, 0.0) + frac * weight / total
            visiting.discard(func)
            if not result:
                result = {loop: 1.0}
        share[func] = result
        return result

    by_layer: Counter[str] = Counter()
    total = 0.0
    for func, (_, _, tottime, _, _) in stats.items():
        total += tottime
        for layer, frac in shares(func).items():
            by_layer[layer] += tottime * frac  # type: ignore[assignment]
    out = [f"{path}: {total:.2f} s of profiled time"]
    unit = " us/req" if us_per_request else ""
    out.append(f"\n{'layer':<66} {'share':>6} {unit:>8}")
    for layer, t in by_layer.most_common():
        cost = f"{t / total * us_per_request:8.1f}" if us_per_request else ""
        out.append(f"{layer:<66} {t / total:6.1%} {cost}")
    out.append(f"\ntop {top} functions by cumulative time (share of profiled time):")
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][3])
    shown = 0
    for (file, line, name), (_, calls, _, cum, _) in ranked:
        rel = _relative(file)
        if rel.startswith(("<frozen", "gateway/cli.py", "gateway/__main__", "asyncio/runners")):
            continue
        if (
            rel in ("gateway/server/runner.py", "<string>")
            or name == "<built-in method builtins.exec>"
        ):
            continue
        cost = f"{cum / total * us_per_request:7.1f} us/req" if us_per_request else ""
        out.append(f"  {cum / total:6.1%} {cost} {calls:>8} calls  {rel}:{line}({name})")
        shown += 1
        if shown >= top:
            break
    return "\n".join(out)


def read_raw(path: Path) -> list[tuple[list[str], int]]:
    stacks = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            stacks.append((stack.split(";"), int(count)))
    return stacks


def report(path: Path, us_per_request: float | None, top: int) -> str:
    stacks = read_raw(path)
    total = sum(n for _, n in stacks)
    by_layer: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaf: Counter[str] = Counter()
    for frames, n in stacks:
        layer = next(
            (lay for lay in map(layer_of, reversed(frames)) if lay is not None),
            LAYERS[12],
        )
        by_layer[layer] += n
        for frame in set(frames):
            inclusive[frame] += n
        leaf[frames[-1]] += n
    out = [f"{path}: {total} samples"]
    unit = " us/req" if us_per_request else ""
    out.append(f"\n{'layer':<66} {'share':>6} {unit:>8}")
    for layer, n in by_layer.most_common():
        cost = f"{n / total * us_per_request:8.1f}" if us_per_request else ""
        out.append(f"{layer:<66} {n / total:6.1%} {cost}")
    out.append(f"\ntop {top} frames by inclusive samples (cumulative):")
    skip = ("<frozen runpy>", "gateway/__main__.py", "gateway/cli.py", "runner.py", "runners.py")
    shown = 0
    for frame, n in inclusive.most_common():
        if any(s in frame for s in skip):
            continue
        out.append(f"  {n / total:6.1%}  {frame}")
        shown += 1
        if shown >= top:
            break
    out.append(f"\ntop {top} leaf frames (self):")
    out.extend(f"  {n / total:6.1%}  {frame}" for frame, n in leaf.most_common(top))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.micro.profile_report")
    parser.add_argument("raw", type=Path, help="py-spy --format raw output, or a .prof")
    parser.add_argument("--us-per-request", type=float, help="gateway CPU us per request")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args(argv)
    if args.raw.suffix == ".prof":
        print(prof_report(args.raw, args.us_per_request, args.top))
    else:
        print(report(args.raw, args.us_per_request, args.top))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
