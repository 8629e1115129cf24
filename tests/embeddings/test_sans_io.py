"""The embeddings modules of gateway/providers are sans-IO like the adapters: nothing they
import, directly or not, does IO, reads a clock or logs (the checker of tests/test_sans_io.py)."""

from __future__ import annotations

from tests.test_sans_io import GATEWAY
from tests.test_sans_io import closure
from tests.test_sans_io import forbidden_in


def test_the_embeddings_package_and_its_wire_types_import_nothing_forbidden() -> None:
    start = sorted((GATEWAY / "providers").rglob("embeddings.py"))
    start.append(GATEWAY / "wire" / "openai_embeddings.py")
    reached = closure(start)
    assert GATEWAY / "providers" / "bedrock" / "embeddings.py" in reached
    assert GATEWAY / "server" / "embeddings.py" not in reached
    assert [problem for path in reached for problem in forbidden_in(path)] == []
