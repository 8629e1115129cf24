"""requirements.lock keeps the runtime dependencies honest (docs/supply-chain.md): every
dependency of pyproject.toml's [project].dependencies, and theirs, is pinned there with its
sha256 hashes; the venv the tests run in holds exactly those versions; and the Makefile and
deploy/Dockerfile install the runtime from the lock with --require-hashes."""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from dataclasses import field
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import NormalizedName
from packaging.utils import canonicalize_name
from packaging.version import Version

from tests.deploy.test_dockerfile import dockerignore_excludes

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements.lock"
SHA256 = re.compile(r"--hash=sha256:([0-9a-f]{64})")


@dataclass
class Pin:
    requirement: Requirement
    hashes: list[str] = field(default_factory=list)

    @property
    def version(self) -> Version:
        (spec,) = self.requirement.specifier
        return Version(spec.version)


def logical_lines(text: str) -> list[str]:
    """The lines of a requirements file or a Dockerfile with `\\` continuations joined and
    comments (whole-line, or after a space) dropped."""
    out: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.split(" #", 1)[0] if not raw.lstrip().startswith("#") else ""
        if line.rstrip().endswith("\\"):
            current += line.rstrip()[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(" ".join(current.split()))
        current = ""
    if current.strip():
        out.append(" ".join(current.split()))
    return out


def parse_lock(text: str) -> dict[NormalizedName, Pin]:
    pins: dict[NormalizedName, Pin] = {}
    for line in logical_lines(text):
        spec, _, _options = line.partition(" --")
        hashes = SHA256.findall(line)
        # every option on a pinned line is a sha256 hash; nothing else (no --index-url etc.)
        assert len(hashes) == line.count("--"), line
        requirement = Requirement(spec)
        name = canonicalize_name(requirement.name)
        assert name not in pins, f"{name} pinned twice"
        pins[name] = Pin(requirement, hashes)
    return pins


@pytest.fixture(scope="module")
def pins() -> dict[NormalizedName, Pin]:
    return parse_lock(LOCK.read_text())


def runtime_dependencies() -> list[Requirement]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return [Requirement(r) for r in pyproject["project"]["dependencies"]]


# The lock is made for CPython 3.11 on linux x86_64 (`make lock`): any 3.11.x, so a marker
# true on 3.11.0 (redis: async-timeout below 3.11.3) counts as well as one true here.
LOCK_PYTHONS: tuple[dict[str, str], ...] = (
    {},
    {"python_version": "3.11", "python_full_version": "3.11.0"},
)


def applies(requirement: Requirement, extras: set[str] | None = None) -> bool:
    if requirement.marker is None:
        return True
    return any(
        requirement.marker.evaluate({**python, "extra": extra})
        for python in LOCK_PYTHONS
        for extra in sorted(extras or {""})
    )


def test_every_pin_is_exact_and_hashed(pins: dict[NormalizedName, Pin]) -> None:
    assert len(pins) >= len(runtime_dependencies())
    for name, pin in pins.items():
        specs = list(pin.requirement.specifier)
        assert len(specs) == 1, name
        assert specs[0].operator == "==", name
        assert "*" not in specs[0].version, name
        assert pin.requirement.url is None, name
        assert pin.hashes, f"{name} has no --hash=sha256:"
        assert len(set(pin.hashes)) == len(pin.hashes), name


def test_no_requirement_line_escapes_the_parser() -> None:
    # a pinned line the parser skipped would not be checked: every line that names a
    # package is a pin of parse_lock's
    named = [line for line in logical_lines(LOCK.read_text()) if re.match(r"[A-Za-z0-9]", line)]
    assert len(named) == len(parse_lock(LOCK.read_text()))


def test_every_runtime_dependency_is_locked_within_its_specifier(
    pins: dict[NormalizedName, Pin],
) -> None:
    for requirement in runtime_dependencies():
        if not applies(requirement):
            continue
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement} is not in requirements.lock"
        pin = pins[name]
        assert requirement.specifier.contains(pin.version, prereleases=True), (
            f"requirements.lock pins {name}=={pin.version}, pyproject.toml asks {requirement}"
        )
        assert pin.hashes, name


def test_the_lock_is_closed_under_dependencies(pins: dict[NormalizedName, Pin]) -> None:
    """Every dependency (with the extras asked for) of every locked package is locked too,
    within its specifier, read from the installed packages' metadata."""
    wanted: dict[NormalizedName, set[str]] = {}
    for requirement in runtime_dependencies():
        if applies(requirement):
            wanted.setdefault(canonicalize_name(requirement.name), set()).update(requirement.extras)
    seen: set[tuple[NormalizedName, frozenset[str]]] = set()
    todo = list(wanted.items())
    while todo:
        name, extras = todo.pop()
        if (name, frozenset(extras)) in seen:
            continue
        seen.add((name, frozenset(extras)))
        assert name in pins, f"{name} is needed but not in requirements.lock"
        for raw in metadata.requires(name) or []:
            requirement = Requirement(raw)
            if not applies(requirement, extras):
                continue
            dependency = canonicalize_name(requirement.name)
            assert dependency in pins, f"{name} needs {requirement}, not in requirements.lock"
            assert requirement.specifier.contains(pins[dependency].version, prereleases=True), (
                f"{name} needs {requirement}, the lock pins {pins[dependency].version}"
            )
            todo.append((dependency, set(requirement.extras)))
    # and nothing in the lock is there for no reason
    assert {name for name, _ in seen} == set(pins)


def test_the_venv_holds_the_locked_versions(pins: dict[NormalizedName, Pin]) -> None:
    # `make`'s install: the lock first, then the dev extras held to it (a constraints file);
    # a dev extra that moved a locked package would show here
    for name, pin in pins.items():
        assert Version(metadata.version(name)) == pin.version, name


def test_the_lock_says_how_it_is_made() -> None:
    head = LOCK.read_text().splitlines()[:3]
    assert "#    make lock" in head


def test_the_lock_tools_are_pinned_dev_extras() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    dev = {
        canonicalize_name(r.name): r
        for r in map(Requirement, pyproject["project"]["optional-dependencies"]["dev"])
    }
    for tool in ("uv", "pip-audit"):
        specs = list(dev[NormalizedName(tool)].specifier)
        assert [s.operator for s in specs] == ["=="], tool


def makefile_rule(target: str) -> list[str]:
    """One Makefile rule: its rule line, then its recipe lines with continuations joined."""
    raw = (ROOT / "Makefile").read_text().splitlines()
    start = next(n for n, line in enumerate(raw) if line.startswith(f"{target}:"))
    recipe = ""
    for line in raw[start + 1 :]:
        if not line.startswith("\t"):
            break
        continued = line.rstrip().endswith("\\")
        recipe += line.strip().removesuffix("\\") + (" " if continued else "\n")
    return [raw[start], *(" ".join(r.split()) for r in recipe.splitlines() if r.strip())]


def test_the_makefile_installs_the_runtime_from_the_lock() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^LOCK := requirements\.lock$", makefile, re.MULTILINE)
    rule, *recipe = makefile_rule("$(STAMP)")
    assert "$(LOCK)" in rule.split(":", 1)[1].split()  # a new lock reinstalls
    assert "pyproject.toml" in rule.split(":", 1)[1].split()
    steps = [line for line in recipe if "pip install" in line]
    locked = next(n for n, s in enumerate(steps) if "--require-hashes -r $(LOCK)" in s)
    project = next(n for n, s in enumerate(steps) if re.search(r"--no-deps -e \.$", s))
    dev = next(n for n, s in enumerate(steps) if "'.[dev]'" in s)
    assert locked < project < dev
    assert "-c $(LOCK_CONSTRAINTS)" in steps[dev]  # the dev extras cannot move a pin
    assert recipe[-1] == "touch $(STAMP)"
    for target in ("run", "test", "lint", "lock"):
        assert "$(STAMP)" in makefile_rule(target)[0]


def test_make_lock_and_make_lint() -> None:
    (compile_,) = [line for line in makefile_rule("lock")[1:] if "pip compile" in line]
    assert "--generate-hashes" in compile_
    assert "--output-file $(LOCK)" in compile_
    (audit,) = [line for line in makefile_rule("lint")[1:] if "audit_lock" in line]
    assert audit.endswith("-m tools.audit_lock $(LOCK)")
    tool = (ROOT / "tools/audit_lock.py").read_text()
    # pip-audit over the hash-checked lock; what it skips is judged, never passed
    assert '"--require-hashes", "-r", lock' in tool
    # a vulnerability is ignored only when no fixed release exists, with the reason written
    # in docs/supply-chain.md
    docs = (ROOT / "docs/supply-chain.md").read_text()
    for ignored in re.findall(r"--ignore-vuln[ =](\S+)", audit + tool):
        assert ignored in docs, f"{ignored} is ignored by make lint but not in the docs"
    from tools.audit_lock import HELD_BACK

    for held in HELD_BACK:
        assert f"`{held}`" in docs, f"{held} is held back but not in docs/supply-chain.md"


def test_the_dockerfile_installs_the_runtime_from_the_lock() -> None:
    lines = logical_lines((ROOT / "deploy/Dockerfile").read_text())
    runs = [line for line in lines if line.startswith("RUN ")]
    build = next(r for r in runs if "pip wheel" in r)
    assert "source=requirements.lock" in build
    assert "pip wheel --wheel-dir /wheels --require-hashes -r /tmp/requirements.lock" in build
    assert "pip wheel --wheel-dir /wheels --no-deps ." in build
    assert "cp /tmp/requirements.lock /wheels/requirements.lock" in build
    runtime = next(r for r in runs if "/opt/venv" in r and "pip" in r)
    commands = [c.strip() for c in runtime.split("&&")]
    installs = [c for c in commands if " install " in c]
    assert len(installs) == 2
    assert all("--no-index --find-links /wheels" in c for c in installs)
    assert installs[0].endswith("--require-hashes -r /wheels/requirements.lock")
    assert installs[1].endswith("--no-deps gateway")


def test_the_build_context_holds_the_lock() -> None:
    assert not dockerignore_excludes("requirements.lock")
