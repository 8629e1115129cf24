"""The repository stands on its own: no tracked file reads or points to the directory beside
it (the recorded streams are in tests/wire_fixtures, the design in docs/design.md, the peer
harness in bench/peers)."""

from __future__ import annotations

import subprocess

from tests.fixtures import FIXTURES
from tests.fixtures import REPO_ROOT

# the ways a file could point at the sibling directory, spelled in parts so that this file
# does not itself name it
SIBLING = b"sha" + b"red"
OUTSIDE = (b"../" + SIBLING, SIBLING + b"/fixtures", b"/work/" + SIBLING)


def test_nothing_points_outside_the_repository() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout.split(b"\0")
    outside = []
    for name in filter(None, tracked):
        path = REPO_ROOT / name.decode()
        if not path.is_file():
            continue
        text = path.read_bytes()
        if any(marker in text for marker in OUTSIDE):
            outside.append(name.decode())
    assert outside == []


def test_the_recorded_streams_are_in_the_repository() -> None:
    assert FIXTURES.is_relative_to(REPO_ROOT)
    assert (FIXTURES / "README.md").is_file()
    assert len(list(FIXTURES.iterdir())) >= 20
