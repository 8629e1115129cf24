"""Hypothesis runs every fuzz target (tests/fuzz/targets.py) on random bytes, on byte
mutations of its seeds (the recorded streams), and on its seeds with fields given values of
the wrong type, out of range or nested past any limit. The target checks the contract; a
test fails when anything else escapes or an invariant breaks.

Kept short for `make test` (`FUZZ_EXAMPLES`, see strategies.py); `make fuzz` runs atheris.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.providers.registry import make_adapter
from tests.fixtures import REPO_ROOT
from tests.fuzz import seeds
from tests.fuzz.contract import json_value
from tests.fuzz.strategies import (
    events_of,
    fuzz_settings,
    json_values,
    mutated_bytes,
    mutated_json,
    payload_of,
    reframed,
    to_json,
)
from tests.fuzz.targets import TARGETS, corpus
from tests.fuzz.targets_providers import (
    PROVIDERS,
    STREAM_DIALECTS,
    UNARY_DIALECTS,
    error_input,
)
from tests.fuzz.targets_requests import EMBEDDING_FAMILIES

NAMES = sorted(TARGETS)


@pytest.mark.parametrize("name", NAMES)
@fuzz_settings
@given(data=st.binary(max_size=2048))
def test_random_bytes(name: str, data: bytes) -> None:
    TARGETS[name](data)


@pytest.mark.parametrize("name", NAMES)
@fuzz_settings
@given(data=st.data())
def test_mutated_seeds(name: str, data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(corpus(name)))
    TARGETS[name](data.draw(mutated_bytes(seed)))


@pytest.mark.parametrize("name", sorted(STREAM_DIALECTS))
@fuzz_settings
@given(data=st.data())
def test_stream_event_fields(name: str, data: st.DataObject) -> None:
    """One recorded stream, one or two of its events with fields of the wrong type, an
    event maybe duplicated, cut anywhere."""
    framing = make_adapter(PROVIDERS[STREAM_DIALECTS[name].provider]).framing
    body = data.draw(st.sampled_from(seeds.stream_fixtures()[name]))
    frames = events_of(framing, body)
    parts = [reframed(framing, f, payload_of(framing, f)) for f in frames]
    for _ in range(data.draw(st.integers(1, 2))):
        at = data.draw(st.integers(0, len(frames) - 1))
        value = json_value(payload_of(framing, frames[at]))
        if value is not None:
            payload = to_json(data.draw(mutated_json(value)))
            parts[at] = reframed(framing, frames[at], payload)
    if data.draw(st.booleans()):
        at = data.draw(st.integers(0, len(parts) - 1))
        parts.insert(at, parts[at])
    cut = data.draw(st.integers(0, 255))
    TARGETS[name](bytes([cut]) + b"".join(parts))


@fuzz_settings
@given(data=st.data())
def test_unary_fields(data: st.DataObject) -> None:
    index = data.draw(st.integers(0, len(UNARY_DIALECTS) - 1))
    seed = json_value(seeds.UNARY_BODIES[UNARY_DIALECTS[index][1]])
    TARGETS["unary"](bytes([index]) + to_json(data.draw(mutated_json(seed))))


@fuzz_settings
@given(data=st.data())
def test_error_fields(data: st.DataObject) -> None:
    status, body = data.draw(st.sampled_from(seeds.error_bodies()))
    provider = data.draw(st.integers(0, len(PROVIDERS) - 1))
    mutated = to_json(data.draw(mutated_json(json_value(body))))
    TARGETS["errors"](error_input(provider, status, mutated))


@fuzz_settings
@given(data=st.data())
def test_embeddings_fields(data: st.DataObject) -> None:
    family = data.draw(st.sampled_from(EMBEDDING_FAMILIES))
    seed = json_value(seeds.EMBEDDINGS_BODIES[family])
    body = to_json(data.draw(mutated_json(seed)))
    TARGETS["embeddings"](bytes([EMBEDDING_FAMILIES.index(family)]) + body)


@pytest.mark.parametrize(
    ("name", "requests"),
    [
        ("messages_request", seeds.MESSAGES_REQUESTS),
        ("responses_request", seeds.RESPONSES_REQUESTS),
    ],
)
@fuzz_settings
@given(data=st.data())
def test_request_fields(name: str, requests: list[bytes], data: st.DataObject) -> None:
    """A valid request with fields of the wrong type, out of range, nested, removed."""
    seed = json_value(data.draw(st.sampled_from(requests)))
    TARGETS[name](to_json(data.draw(mutated_json(seed))))


@pytest.mark.parametrize("name", ["messages_request", "responses_request"])
@fuzz_settings
@given(body=st.dictionaries(st.sampled_from(["model", "messages", "input", "tools"]), json_values))
def test_request_any_object(name: str, body: dict[str, Any]) -> None:
    TARGETS[name](to_json(body))


def test_every_target_has_a_harness() -> None:
    harnesses = {p.stem.removeprefix("fuzz_") for p in (REPO_ROOT / "fuzz").glob("fuzz_*.py")}
    assert harnesses == set(TARGETS)


def test_every_target_takes_its_seeds() -> None:
    """The seeds themselves pass (a target that refused them would fuzz nothing)."""
    for name in NAMES:
        for seed in corpus(name):
            TARGETS[name](seed)
