"""bench.load --observe: each mode's config is one the gateway serves, and --observe needs
--full (the benchmark of what the request log and tracing cost, bench/observe_cost.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.load import parse_args
from bench.load_full import OBSERVE_MODES
from bench.load_full import full_config
from bench.load_full import observe_config
from gateway.config import parse_config


@pytest.mark.parametrize("mode", OBSERVE_MODES)
def test_every_mode_makes_a_config_the_gateway_serves(mode: str, tmp_path: Path) -> None:
    text = full_config(8000, 9000, tmp_path / "gw.db", "m", "u")
    text += observe_config(mode, tmp_path, 9000, "postgresql://bench@127.0.0.1:5432/bench")
    config = parse_config(text, env={})
    assert (config.request_log is not None) == mode.startswith("log-")
    assert (config.tracing is not None) == (mode == "tracing")
    assert (config.cache.mode == "exact") == mode.startswith("cache-")


def test_observe_needs_full() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--observe", "tracing"])
    assert parse_args(["--full", "--observe", "log-sqlite"]).observe == "log-sqlite"
    assert parse_args(["--observe", "cache-hit"]).observe == "cache-hit"  # bare gateway too
