"""The sans-IO core imports nothing that does IO, reads a clock or logs.

Walks the AST (nothing is imported to check it) of every module of the sans-IO packages and
of every gateway module they import, directly or not, and fails on any import of a
forbidden module: at the top, inside a function, under `if TYPE_CHECKING:`, or through
`__import__` / `importlib.import_module` with a literal name.
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


def forbidden(source: str, package: str, where: str) -> list[str]:
    """`"<where>:<line>: imports <top-level module>"` for every forbidden import in `source`."""
    hits = {
        (line, imported.split(".")[0])
        for imported, line in imports(ast.parse(source, filename=where), package)
    }
    return [f"{where}:{line}: imports {top}" for line, top in sorted(hits) if top in FORBIDDEN]


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
