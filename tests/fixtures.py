"""Where the recorded upstream wire fixtures live: `tests/wire_fixtures/`, in the repository
(its README says where each recording came from and what in it trips translators up)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "tests" / "wire_fixtures"
