"""Where the recorded upstream wire fixtures live: `shared/fixtures` beside the repository.

The fixtures are not part of this repository; CI checks them out next to it, so the path is
`<repo>/../shared/fixtures` wherever the repository is cloned.
"""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT.parent / "shared" / "fixtures"

if not FIXTURES.is_dir():
    raise FileNotFoundError(
        f"wire fixtures not found at {FIXTURES}: check out the shared fixtures as "
        f"'shared/fixtures' beside the repository ({REPO_ROOT})"
    )
