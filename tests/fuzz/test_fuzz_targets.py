"""Hypothesis runs every fuzz target (tests/fuzz/targets.py) on random bytes, on byte
mutations of its seeds (the recorded streams), and on its seeds with fields given values of
the wrong type, out of range or nested past any limit. The target checks the contract; a
test fails when anything else escapes or an invariant breaks.

Kept short for `make test` (`FUZZ_EXAMPLES`, see strategies.py); `make fuzz` runs atheris.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from types import FrameType
from types import TracebackType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import gateway
from gateway.framing.sse import SSEDecoder
from gateway.inbound.messages_request import translate_request
from gateway.providers.registry import make_adapter
from gateway.server.request_body import typed
from gateway.wire.anthropic import InboundRequest
from tests.fixtures import REPO_ROOT
from tests.fuzz import seeds
from tests.fuzz.contract import json_value
from tests.fuzz.strategies import events_of
from tests.fuzz.strategies import fuzz_settings
from tests.fuzz.strategies import json_values
from tests.fuzz.strategies import mutated_bytes
from tests.fuzz.strategies import mutated_json
from tests.fuzz.strategies import payload_of
from tests.fuzz.strategies import reframed
from tests.fuzz.strategies import to_json
from tests.fuzz.targets import TARGETS
from tests.fuzz.targets import WHOLE_INPUT
from tests.fuzz.targets import Target
from tests.fuzz.targets import _huge_prelude
from tests.fuzz.targets import corpus
from tests.fuzz.targets_providers import PROVIDERS
from tests.fuzz.targets_providers import STREAM_DIALECTS
from tests.fuzz.targets_providers import UNARY_DIALECTS
from tests.fuzz.targets_providers import error_input
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


# --- the seeds -------------------------------------------------------------------------
#
# A target returns None whatever it is fed: it takes the documented error of the code under
# test (a FramingError, an UpstreamError, a 400) as a verdict and returns. So calling it on
# its seeds proves nothing by itself: a seed the code refuses at its first byte passes, and
# so does an empty corpus, while the fuzzers then mutate nothing but an error path. Each
# seed is therefore run under a trace that sees every exception the code under test
# (`gateway/`) raised and the harness caught, and counts the calls into `gateway/`.

_GATEWAY = str(Path(gateway.__file__).parent)
_HARNESS = str(Path(__file__).parent)

# Seeds that are in the corpus for the error path: the target must refuse them (with the
# raise site named here) and every other seed of the target must be taken whole.
_ERROR_PAYLOADS: dict[str, tuple[set[bytes], str]] = {
    "anthropic": (
        {seeds._read("anthropic_error_event.sse")},
        "AnthropicStreamTranslator.feed",  # the recorded `event: error`
    ),
    "ollama": (
        {seeds._read("ollama_stream_error.ndjson")},
        "OllamaStreamTranslator.feed",  # the recorded `{"error": ...}` line
    ),
    "aws_eventstream": ({_huge_prelude()}, "EventStreamDecoder._fail"),  # a 4 GiB frame
}
# Refusals that are a target's side check, not a verdict on the seed: the embeddings target
# also tries each upstream answer as a client's `input`, which an answer object never is.
_SIDE_CHECKS: dict[str, set[str]] = {"embeddings": {"parse_input"}}


@dataclass
class SeedRun:
    """What one call of a target did in the code under test."""

    calls: int = 0  # frames of gateway/ code entered
    refused: set[str] = field(default_factory=set)  # raise sites the harness caught


def _raise_site(tb: TracebackType | None) -> str | None:
    """The function an exception was raised in, when that is gateway/ code."""
    if tb is None:
        return None
    while tb.tb_next is not None:
        tb = tb.tb_next
    code = tb.tb_frame.f_code
    return code.co_qualname if code.co_filename.startswith(_GATEWAY) else None


def run_traced(target: Target, data: bytes) -> SeedRun:
    """`target(data)`, recording its calls into gateway/ and the gateway/ exceptions that
    reached a frame of the harness (tests/fuzz): those are the refusals it took as its
    verdict. What the target raises escapes."""
    run = SeedRun()

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "exception":
            site = _raise_site(arg[2])
            if site is not None:
                run.refused.add(site)
        return local

    def calls(frame: FrameType, event: str, arg: Any) -> Any:
        filename = frame.f_code.co_filename
        if filename.startswith(_GATEWAY):
            run.calls += 1
            return None
        return local if filename.startswith(_HARNESS) else None

    previous = sys.gettrace()
    sys.settrace(calls)
    try:
        target(data)
    finally:
        sys.settrace(previous)
    return run


def check_seeds(
    name: str,
    target: Target,
    inputs: Sequence[bytes],
    refused_on_purpose: Callable[[bytes], bool] = lambda _: False,
    refusal_site: str | None = None,
    side_checks: set[str] | frozenset[str] = frozenset(),
) -> list[SeedRun]:
    """Every seed runs the code under test and is taken whole, except the seeds put in for
    the error path, which must be refused where `refusal_site` says. AssertionError names
    the first seed that does otherwise."""
    assert inputs, f"{name}: the corpus is empty, the fuzzers would mutate nothing"
    runs = []
    for i, seed in enumerate(inputs):
        where = f"{name} seed {i} ({seed[:40]!r}...)"
        try:
            run = run_traced(target, seed)
        except Exception as exc:
            raise AssertionError(f"{where} raised {exc!r}") from exc
        assert run.calls > 0, f"{where} never reached the code under test"
        verdicts = run.refused - side_checks
        if refused_on_purpose(seed):
            assert verdicts == {refusal_site}, f"{where} is an error seed, refused at {verdicts}"
        else:
            assert not verdicts, f"{where} was refused (raised in {sorted(verdicts)})"
        runs.append(run)
    assert any(not (r.refused - side_checks) for r in runs), f"{name}: every seed refused"
    return runs


def _is_error_seed(name: str) -> Callable[[bytes], bool]:
    payloads = _ERROR_PAYLOADS.get(name, (set(), ""))[0]
    if name in WHOLE_INPUT:
        return lambda seed: seed in payloads
    return lambda seed: seed[1:] in payloads  # behind its cut byte


@pytest.mark.parametrize("name", NAMES)
def test_every_target_takes_its_seeds(name: str) -> None:
    """The seeds reach the code under test and are taken whole (a target whose code refused
    them would fuzz nothing but its error path); the error seeds are refused where meant."""
    runs = check_seeds(
        name,
        TARGETS[name],
        corpus(name),
        _is_error_seed(name),
        _ERROR_PAYLOADS.get(name, (set(), None))[1],
        _SIDE_CHECKS.get(name, set()),
    )
    refused = sum(bool(r.refused - _SIDE_CHECKS.get(name, set())) for r in runs)
    print(f"{name}: {len(runs)} seeds, {refused} on the error path")


def test_error_seeds_are_in_the_corpus() -> None:
    """The error seeds named above exist (else their targets' check would not see them)."""
    for name, (payloads, _) in _ERROR_PAYLOADS.items():
        assert any(_is_error_seed(name)(seed) for seed in corpus(name)), name
        assert all(payloads), name


# --- the check itself fails where it must --------------------------------------------------


def _sse_seeds() -> list[bytes]:
    return corpus("sse")[:4]


def test_seed_check_fails_on_a_target_that_raises() -> None:
    def broken(data: bytes) -> None:
        TARGETS["sse"](data)
        if data[:1] == b"\x07":
            raise KeyError("a finding")

    with pytest.raises(AssertionError, match=r"sse seed 2 .* raised KeyError"):
        check_seeds("sse", broken, _sse_seeds())


def test_seed_check_fails_on_an_empty_corpus() -> None:
    with pytest.raises(AssertionError, match="the corpus is empty"):
        check_seeds("sse", TARGETS["sse"], [])


def test_seed_check_fails_on_a_target_that_calls_nothing() -> None:
    with pytest.raises(AssertionError, match="never reached the code under test"):
        check_seeds("sse", lambda data: None, _sse_seeds())


def test_seed_check_fails_when_the_code_refuses_every_seed() -> None:
    """A target that takes the code's 400 as its verdict, on every seed, passes when merely
    called; the check sees the refusal."""

    def refusing(data: bytes) -> None:
        try:
            translate_request(typed({"model": 1}, InboundRequest))
        except Exception:
            return

    with pytest.raises(AssertionError, match="was refused"):
        check_seeds("messages_request", refusing, seeds.MESSAGES_REQUESTS)


def test_seed_check_fails_when_an_error_seed_is_taken() -> None:
    """An error seed the code no longer refuses (a decoder that stopped enforcing its bound)
    fails too."""

    def lenient(data: bytes) -> None:
        SSEDecoder().feed(data)

    with pytest.raises(AssertionError, match="is an error seed"):
        check_seeds("sse", lenient, [b"data: x\n\n"], lambda _: True, "EventStreamDecoder._fail")
