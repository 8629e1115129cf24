"""`gateway check-config`, and that every provider kind a config may name is built."""

from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from gateway.cli import main
from gateway.providers.registry import ProviderConfig
from gateway.providers.registry import supported_kinds

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


def test_every_config_kind_is_built() -> None:
    # the serve command's refusal of unbuilt kinds can no longer trigger: every kind a
    # config may name has an adapter
    assert {member.kind for member in get_args(ProviderConfig)} == supported_kinds()


def test_tool_emulation_config_is_accepted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "e.yaml"
    path.write_text(
        "providers: [{name: mock, kind: mock}]\n"
        "models: [{name: m, tools: emulate, targets: [{provider: mock, model: mock}]}]\n"
    )
    assert main(["check-config", str(path)]) == 0
