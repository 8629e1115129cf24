"""The sans-IO core imports nothing that does IO, reads a clock or logs.

Walks the AST (nothing is imported to check it) of every module of the sans-IO packages and
of every gateway module they import, directly or not, and fails on any import of a
forbidden module: at the top, inside a function, under `if TYPE_CHECKING:`, or through
`__import__` / `importlib.import_module` with a literal name. It also fails on a clock
read: a call of `datetime.now`, `datetime.utcnow`, `datetime.today` or `date.today` (under
any name the module gives them) and any call of a `time.*` function; time is passed in.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GATEWAY = ROOT / "gateway"
FORBIDDEN = frozenset({"asyncio", "aiohttp", "socket", "logging", "time", "prometheus_client"})
SANS_IO_PACKAGES = ("wire", "framing", "providers", "inbound", "emulation")
SANS_IO_MODULES = (
    "stream/accumulator.py",
    "stream/chat_outbound.py",
    "stream/continuation.py",
    "stream/outbound.py",
    "stream/pipeline.py",
)


def sans_io_files() -> list[Path]:
    files = [p for pkg in SANS_IO_PACKAGES for p in sorted((GATEWAY / pkg).rglob("*.py"))]
    return files + [GATEWAY / m for m in SANS_IO_MODULES]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def package_of(path: Path) -> str:
    """The package that relative imports in `path` start from."""
    name = module_name(path)
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def module_path(name: str) -> Path | None:
    """The file of a `gateway...` module or package, None when there is none."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def imports(tree: ast.AST, package: str) -> Iterator[tuple[str, int]]:
    """Every (absolute module name, line) the tree imports, including `from x import y`'s
    `x.y` (which may be a submodule) and literal dynamic imports."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, node.module] if node.module else anchor)
            else:
                base = node.module or ""
            yield base, node.lineno
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno
        elif isinstance(node, ast.Call) and node.args:
            func, first = node.func, node.args[0]
            dynamic = (isinstance(func, ast.Name) and func.id == "__import__") or (
                isinstance(func, ast.Attribute) and func.attr == "import_module"
            )
            if dynamic and isinstance(first, ast.Constant) and isinstance(first.value, str):
                yield first.value, node.lineno


CLOCK_METHODS = {"datetime.datetime": ("now", "utcnow", "today"), "datetime.date": ("today",)}


def _bindings(tree: ast.AST) -> dict[str, str]:
    """Local name -> what it stands for (`datetime`, `datetime.datetime`, `time`...), from
    the module's imports; the bare names stand for themselves too (a name that is never
    imported is a NameError, but a clock read in intent all the same)."""
    names = {"datetime": "datetime.datetime", "date": "datetime.date", "time": "time"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.partition(".")[0]
                names[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            for alias in node.names:
                names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return names


def _dotted(node: ast.expr, names: dict[str, str]) -> str | None:
    """`a.b.c` for a chain of attributes on a name, with the name resolved."""
    if isinstance(node, ast.Name):
        return names.get(node.id, node.id)
    if isinstance(node, ast.Attribute):
        owner = _dotted(node.value, names)
        return f"{owner}.{node.attr}" if owner is not None else None
    return None


def clock_reads(tree: ast.AST) -> Iterator[tuple[int, str]]:
    """(line, what) for every call that reads the clock."""
    names = _bindings(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        owner = _dotted(node.func.value, names)
        if owner == "time" or node.func.attr in CLOCK_METHODS.get(owner or "", ()):
            yield node.lineno, f"{owner}.{node.func.attr}"
    for node in ast.walk(tree):  # `from time import time` or `from datetime import ...now`
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            target = names.get(node.func.id, "")
            owner, _, attr = target.rpartition(".")
            if owner == "time" or attr in CLOCK_METHODS.get(owner, ()):
                yield node.lineno, target


def forbidden(source: str, package: str, where: str) -> list[str]:
    """`"<where>:<line>: imports <top-level module>"` for every forbidden import in `source`
    and `"<where>:<line>: reads the clock (<call>)"` for every clock read."""
    tree = ast.parse(source, filename=where)
    hits = {(line, imported.split(".")[0]) for imported, line in imports(tree, package)}
    problems = [(line, f"imports {top}") for line, top in hits if top in FORBIDDEN]
    problems += [(line, f"reads the clock ({what})") for line, what in clock_reads(tree)]
    return [f"{where}:{line}: {problem}" for line, problem in sorted(set(problems))]


def forbidden_in(path: Path) -> list[str]:
    source = path.read_text(encoding="utf-8")
    return forbidden(source, package_of(path), str(path.relative_to(ROOT)))


def closure(start: list[Path]) -> list[Path]:
    """`start` plus every gateway module (and enclosing package) they import, transitively."""
    seen: dict[Path, None] = {}
    todo = list(start)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen[path] = None
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for imported, _ in imports(tree, package_of(path)):
            parts = imported.split(".")
            if parts[0] != "gateway":
                continue
            for i in range(1, len(parts) + 1):  # importing a.b.c runs a and a.b too
                found = module_path(".".join(parts[:i]))
                if found is not None:
                    todo.append(found)
    return sorted(seen)


def test_the_sans_io_set_is_what_the_design_names() -> None:
    names = {module_name(p) for p in sans_io_files()}
    assert {
        "gateway.wire.openai_chat",
        "gateway.framing.sse",
        "gateway.providers.base",
        "gateway.providers.openai.adapter",
        "gateway.providers.mock.adapter",
        "gateway.providers.registry",
        "gateway.stream.accumulator",
        "gateway.stream.chat_outbound",
    } <= names
    assert all(p.is_file() for p in sans_io_files())


@pytest.mark.parametrize("path", sans_io_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_sans_io_module_imports_nothing_forbidden(path: Path) -> None:
    assert forbidden_in(path) == []


def test_nothing_the_sans_io_core_imports_is_forbidden_either() -> None:
    reached = closure(sans_io_files())
    assert GATEWAY / "config.py" in reached  # the walk does follow gateway imports
    assert GATEWAY / "stream" / "actor.py" not in reached
    problems = [problem for path in reached for problem in forbidden_in(path)]
    assert problems == []


# --- the checker itself -----------------------------------------------------------------------

CAUGHT = [
    "import asyncio",
    "import asyncio.subprocess",
    "import aiohttp as http",
    "from aiohttp import web",
    "from aiohttp.web import Request",
    "import socket",
    "import logging",
    "from logging import getLogger",
    "import time",
    "from time import monotonic",
    "import prometheus_client",
    "from prometheus_client import Counter",
    "import os, time",
    "def f():\n    import time\n    return time.time()",
    "class C:\n    def m(self):\n        from asyncio import sleep",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aiohttp import web",
    "try:\n    import uvloop\nexcept ImportError:\n    import asyncio",
    "mod = __import__('socket')",
    "import importlib\nmod = importlib.import_module('logging')",
]

CLOCK_READS = [
    "from datetime import UTC, datetime\nnow = datetime.now(UTC)",
    "from datetime import datetime\nstamp = datetime.utcnow()",
    "from datetime import datetime as dt\nday = dt.today()",
    "from datetime import date\nday = date.today()",
    "import datetime\nnow = datetime.datetime.now()",
    "import datetime as d\nday = d.date.today()",
    "def f(t):\n    return t - time.monotonic()",  # `time` reached without its import
    "def f():\n    return time.time_ns()",
    "class C:\n    def m(self):\n        return datetime.now()",
]


@pytest.mark.parametrize("source", CAUGHT)
def test_checker_catches(source: str) -> None:
    assert forbidden(source, "gateway.wire", "gateway/wire/probe.py")


@pytest.mark.parametrize(
    "source",
    [
        "import msgspec",
        "from gateway.errors import FramingError",
        "import datetime",
        "from . import sse",
        "from .time import units",  # gateway.wire.time, a module of ours
        "import timeit",
        "x = time.time",  # not an import: a NameError, not this test's business
    ],
)
def test_checker_allows(source: str) -> None:
    assert forbidden(source, "gateway.wire", "gateway/wire/probe.py") == []


@pytest.mark.parametrize("source", CLOCK_READS)
def test_checker_catches_clock_reads(source: str) -> None:
    problems = forbidden(source, "gateway.wire", "gateway/wire/probe.py")
    assert any("reads the clock" in p for p in problems), problems


@pytest.mark.parametrize(
    "source",
    [
        "from datetime import UTC, datetime\nwhen = datetime.fromtimestamp(now, UTC)",
        "from datetime import date\nday = date(2024, 1, 2)",
        "import datetime\nstamp = datetime.datetime.fromisoformat(text)",
        "def f(clock):\n    return clock.now()",  # a clock passed in: that is the point
        "def f(call):\n    return call.time()",
    ],
)
def test_checker_allows_time_passed_in(source: str) -> None:
    assert forbidden(source, "gateway.wire", "gateway/wire/probe.py") == []


def test_checker_names_the_clock_read_and_line() -> None:
    source = "from datetime import UTC, datetime\n\n\ndef f():\n    return datetime.now(UTC)\n"
    assert forbidden(source, "gateway.wire", "gateway/wire/probe.py") == [
        "gateway/wire/probe.py:5: reads the clock (datetime.datetime.now)"
    ]


def test_checker_names_the_module_and_line() -> None:
    source = "import msgspec\n\n\ndef f():\n    import logging\n    from time import sleep\n"
    assert forbidden(source, "gateway.wire", "gateway/wire/probe.py") == [
        "gateway/wire/probe.py:5: imports logging",
        "gateway/wire/probe.py:6: imports time",
    ]


def test_relative_imports_resolve_against_the_package() -> None:
    tree = ast.parse("from . import sse\nfrom ..errors import FramingError\n")
    assert [m for m, _ in imports(tree, "gateway.framing")] == [
        "gateway.framing",
        "gateway.framing.sse",
        "gateway.errors",
        "gateway.errors.FramingError",
    ]
