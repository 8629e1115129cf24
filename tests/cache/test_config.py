"""The `cache` section: off by default, every problem named with its path."""

from __future__ import annotations

import pytest

from gateway.config import ConfigError
from gateway.config import parse_config
from gateway.server.reload import restart_only_changes

BASE = """
store: {url: "memory://"}
providers: [{name: m, kind: mock}]
models:
  - {name: a, targets: [{provider: m, model: mock}]}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, {})
    return info.value.problems


def test_off_by_default() -> None:
    config = parse_config(BASE, {})
    assert config.cache.mode == "off"
    assert config.models[0].cache is None


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("{mode: exact, ttl_s: 0, store: memory}", "cache.ttl_s: must be more than 0"),
        ("{mode: exact, max_entry_bytes: 0, store: memory}", "cache.max_entry_bytes"),
        ("{mode: exact, max_bytes: 10, store: memory}", "at least max_entry_bytes"),
        ("{mode: semantic, store: memory}", "mode semantic needs cache.semantic"),
        (
            "{mode: semantic, store: memory, semantic: {embedding_model: nope}}",
            "cache.semantic.embedding_model: 'nope' is not one of models[].name",
        ),
        (
            "{mode: semantic, store: memory, semantic: {embedding_model: a, threshold: 1.5}}",
            "cache.semantic.threshold: must be more than 0 and at most 1",
        ),
        (
            "{mode: semantic, store: memory, semantic: {embedding_model: a, max_entries: 0}}",
            "cache.semantic.max_entries: must be at least 1",
        ),
        ("{mode: exact, store: sqlite}", "store sqlite needs a sqlite:/// URL"),
        ("{mode: exact, store: redis}", "store redis needs a redis:// or rediss:// URL"),
        ("{mode: sometimes}", "cache.mode"),
        ("{mode: exact, color: blue}", "cache.color"),
    ],
)
def test_problems_name_their_path(section: str, expected: str) -> None:
    found = problems(BASE + f"cache: {section}\n")
    assert any(expected in p for p in found), found


def test_sqlite_uses_the_store_url_or_its_own() -> None:
    text = BASE.replace('"memory://"', '"sqlite:///:memory:"') + "cache: {mode: exact}\n"
    assert parse_config(text, {}).cache.store == "sqlite"
    own = BASE + 'cache: {mode: exact, store: sqlite, url: "sqlite:///:memory:"}\n'
    assert parse_config(own, {}).cache.url == "sqlite:///:memory:"


def test_the_cache_changes_only_with_a_restart() -> None:
    model = "models: [{name: a, targets: [{provider: m, model: mock}]%s}]\n"
    base = 'store: {url: "memory://"}\nproviders: [{name: m, kind: mock}]\n'
    old = parse_config(base + "cache: {store: memory}\n" + model % "", {})
    assert restart_only_changes(old, old) == []
    turned_on = parse_config(base + "cache: {mode: exact, store: memory}\n" + model % "", {})
    assert restart_only_changes(old, turned_on) == [
        "cache: changes only with a restart; nothing was applied"
    ]
    one_model = parse_config(
        base + "cache: {store: memory}\n" + model % ", cache: {mode: exact}", {}
    )
    assert restart_only_changes(old, one_model) == [
        "models[].cache: changes only with a restart; nothing was applied"
    ]


def test_a_model_may_be_semantic_alone() -> None:
    text = BASE.replace(
        "models:\n", "cache: {store: memory, semantic: {embedding_model: a}}\nmodels:\n"
    ).replace("model: mock}]}", "model: mock}], cache: {mode: semantic}}")
    config = parse_config(text, {})
    assert config.cache.mode == "off"
    assert config.models[0].cache is not None
    assert config.models[0].cache.mode == "semantic"
