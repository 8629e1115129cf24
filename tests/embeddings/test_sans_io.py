"""gateway/embeddings is sans-IO, like the provider adapters: nothing it imports, directly or
not, does IO, reads a clock or logs (the checker of tests/test_sans_io.py)."""

from __future__ import annotations

from tests.test_sans_io import GATEWAY, closure, forbidden_in


def test_the_embeddings_package_and_its_wire_types_import_nothing_forbidden() -> None:
    start = sorted((GATEWAY / "embeddings").glob("*.py"))
    start.append(GATEWAY / "wire" / "openai_embeddings.py")
    reached = closure(start)
    assert GATEWAY / "embeddings" / "bedrock.py" in reached
    assert GATEWAY / "server" / "embeddings.py" not in reached
    assert [problem for path in reached for problem in forbidden_in(path)] == []
