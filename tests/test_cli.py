"""`gateway check-config` and the serve command's refusal of unbuilt provider kinds."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.cli import main

REPO = Path(__file__).resolve().parents[1]


def test_check_config_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", str(REPO / "examples" / "mock.yaml")]) == 0
    assert capsys.readouterr().out.startswith("ok: ")


def test_check_config_lists_every_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "server: {port: high}\n"
        "providers:\n  - {name: openai, kind: openai, keys: [{key: k}]}\n"
        "models:\n  - {name: m, targets: [{provider: opneai, model: x}]}\n"
    )
    assert main(["check-config", str(path)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert "server.port: expected int, got str" in out
    assert "models[0].targets[0].provider: unknown provider 'opneai'" in out
    assert out[-1] == f"2 problems in {path}"


def test_unbuilt_kind_is_a_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "k.yaml"
    path.write_text(
        "providers:\n  - {name: a, kind: bedrock, region: us-east-1, keys: [{key: x}]}\n"
    )
    assert main(["check-config", str(path)]) == 1
    assert "providers[0].kind: kind 'bedrock' is not available in this build yet" in (
        capsys.readouterr().out
    )
    assert main(["serve", "--config", str(path)]) == 2
