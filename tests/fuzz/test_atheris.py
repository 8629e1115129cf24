"""A short atheris run of every harness in fuzz/ (the long one is `make fuzz`): each starts
from its seeds alone (a fresh corpus directory), mutates for about a second, and must exit
cleanly with libFuzzer's statistics (a finding exits non-zero and names its input)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fuzz.run_all import HARNESSES
from fuzz.run_all import report
from fuzz.run_all import run_many

# atheris ships manylinux wheels for CPython 3.8-3.12 (pyproject's dev extra installs it)
pytest.importorskip("atheris", reason="atheris is not installed for this Python")

SECONDS = 1
RUNS = 3000
# two harnesses at a time: most of a short run is the instrumented import
GROUPS = [HARNESSES[i : i + 2] for i in range(0, len(HARNESSES), 2)]


@pytest.mark.parametrize("names", GROUPS, ids="+".join)
def test_harnesses_run_clean(names: list[str], tmp_path: Path) -> None:
    outcomes = run_many(names, SECONDS, RUNS, corpus_root=tmp_path, jobs=2)  # the seeds only
    for outcome in outcomes:
        assert outcome.ok, report([outcome]) + "\n" + outcome.output[-3000:]
        assert outcome.executions > 0
