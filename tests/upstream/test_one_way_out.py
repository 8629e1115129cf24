"""The one way out, as rules on the source: every upstream wait is on the shared alarm
clock (no `asyncio.timeout`/`timeout_at` on the upstream paths), and every upstream call
goes through the attempt runner (no other module walks a plan)."""

from __future__ import annotations

import ast
from pathlib import Path

GATEWAY = Path(__file__).resolve().parents[2] / "gateway"
# the modules every upstream call passes through
UPSTREAM_PATHS = [
    *sorted((GATEWAY / "upstream").glob("*.py")),
    GATEWAY / "stream" / "actor.py",
    GATEWAY / "server" / "embeddings.py",
    GATEWAY / "server" / "count_tokens.py",
    GATEWAY / "server" / "messages.py",
    GATEWAY / "server" / "inference.py",
]
TIMEOUTS = {"timeout", "timeout_at", "wait_for"}


def attribute_calls(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, dotted name) of every `a.b(...)` call whose object is a plain name."""
    return [
        (node.lineno, f"{node.func.value.id}.{node.func.attr}")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and isinstance(node.func.value, ast.Name)
    ]


def test_no_asyncio_timeout_on_the_upstream_paths() -> None:
    found = [
        f"{path.relative_to(GATEWAY)}:{line}: {name}"
        for path in UPSTREAM_PATHS
        for line, name in attribute_calls(ast.parse(path.read_text(encoding="utf-8")))
        if name.startswith("asyncio.") and name.removeprefix("asyncio.") in TIMEOUTS
    ]
    assert found == []


def test_only_the_runner_asks_key_health_to_begin_an_attempt() -> None:
    begins = [
        str(path.relative_to(GATEWAY))
        for path in sorted(GATEWAY.rglob("*.py"))
        if path.parent.name != "routing"
        and any(
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "begin"
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        )
    ]
    # and the circuit probe, which is no client's attempt: the gateway's own half-open probe
    assert begins == ["server/circuit_probe.py", "upstream/attempts.py"]


def test_the_checker_sees_a_timeout() -> None:
    tree = ast.parse("async def f():\n    async with asyncio.timeout(1):\n        pass\n")
    assert (2, "asyncio.timeout") in attribute_calls(tree)
