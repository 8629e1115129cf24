"""The one atheris runner every harness calls: seeds a corpus directory from the recorded
fixtures at run time (under build/fuzz/, never committed), instruments the gateway's code
for coverage, and hands the target to libFuzzer with the command line's flags.

A harness exits 0 when the run ends with no finding; a finding (an exception escaping the
target, a hang past `-timeout`, memory past `-rss_limit_mb`) makes libFuzzer write the input
to build/fuzz/<name>/crash-* and exit non-zero.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import atheris

REPO = Path(__file__).resolve().parents[1]
WORK = REPO / "build" / "fuzz"
# the code the targets exercise, instrumented for coverage (not config, server, CLI: that
# costs startup time and guides nothing)
INSTRUMENTED = (
    "gateway.framing",
    "gateway.wire",
    "gateway.providers",
    "gateway.stream",
    "gateway.inbound",
    "gateway.emulation",
)


def corpus_dir(path: Path, seeds: list[bytes]) -> Path:
    """`path` with every seed in it (libFuzzer adds what it finds)."""
    path.mkdir(parents=True, exist_ok=True)
    for seed in seeds:
        (path / hashlib.sha1(seed).hexdigest()).write_bytes(seed)
    return path


def main(name: str) -> None:
    with atheris.instrument_imports(include=list(INSTRUMENTED)):
        from tests.fuzz.targets import TARGETS
        from tests.fuzz.targets import corpus

    target = TARGETS[name]
    flags = [a for a in sys.argv[1:] if a.startswith("-")]
    dirs = [a for a in sys.argv[1:] if not a.startswith("-")]
    if not (dirs and Path(dirs[0]).is_file()):  # files: replay them (a crash-* input)
        # the first directory is the one libFuzzer writes to: the seeds go there
        first = Path(dirs[0]) if dirs else WORK / name / "corpus"
        dirs = [str(corpus_dir(first, corpus(name))), *dirs[1:]]
    artifacts = WORK / name
    artifacts.mkdir(parents=True, exist_ok=True)
    defaults = [f"-artifact_prefix={artifacts}/", "-timeout=10", "-rss_limit_mb=2048"]
    given = {f.split("=", 1)[0] for f in flags}
    flags += [f for f in defaults if f.split("=", 1)[0] not in given]
    atheris.Setup([sys.argv[0], *flags, *dirs], target)
    atheris.Fuzz()
