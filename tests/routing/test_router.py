"""Router.plan: priority tiers, weighted draws of targets and keys, the attempt cap, addressing."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.config import Config
from gateway.config import parse_config
from gateway.errors import UnknownModel
from gateway.providers.mock.adapter import MockAdapter
from gateway.providers.openai.adapter import OpenAIAdapter
from gateway.providers.registry import make_adapter
from gateway.routing.router import Attempt
from gateway.routing.router import Router
from gateway.routing.router import weighted_order

RUNS = 5000
TOLERANCE = 0.025  # about 4 standard deviations of a share estimated from RUNS draws

PROVIDERS = """
providers:
  - name: up
    kind: openai
    base_url: http://up.test/v1
    keys: [{key: up-a, weight: 3}, {key: up-b, weight: 1}]
  - name: alt
    kind: openai
    base_url: http://alt.test/v1
    keys: [{key: alt-a}]
  - name: third
    kind: openai
    base_url: http://third.test/v1
    keys: [{key: third-a}, {key: third-b}, {key: third-c}]
  - name: mock
    kind: mock
"""


def config(models: str, routing: str = "") -> Config:
    return parse_config(routing + PROVIDERS + "models:\n" + models, env={})


def router(models: str, routing: str = "", seed: int = 0) -> Router:
    cfg = config(models, routing)
    adapters = {p.name: make_adapter(p) for p in cfg.providers}
    return Router(cfg, adapters, rng=random.Random(seed))


def where(attempt: Attempt) -> tuple[str, str | None]:
    """(provider name, revealed key or None) of one attempt."""
    key = attempt.key.key.reveal() if attempt.key is not None and attempt.key.key else None
    return attempt.provider.name, key


def providers_of(plan: list[Attempt]) -> list[str]:
    """Provider names in plan order, consecutive repeats (keys of one target) folded."""
    return [name for name, _ in itertools.groupby(a.provider.name for a in plan)]


ROUTING_10 = "routing: {max_attempts: 10}\n"


# --- priorities, weights and keys -------------------------------------------------------------


def test_priorities_are_tried_lowest_first_whatever_the_config_order() -> None:
    r = router(
        """
  - name: smart
    targets:
      - {provider: mock, model: m-2, priority: 2}
      - {provider: alt, model: m-0, priority: 0}
      - {provider: up, model: m-1, priority: 1}
""",
        ROUTING_10,
    )
    for _ in range(50):
        plan = r.plan("smart")
        assert [a.model for a in plan] == ["m-0", "m-1", "m-1", "m-2"]
        assert providers_of(plan) == ["alt", "up", "mock"]


def test_targets_of_one_priority_are_drawn_by_weight() -> None:
    r = router(
        """
  - name: smart
    targets:
      - {provider: alt, model: heavy, weight: 3}
      - {provider: mock, model: light, weight: 1}
      - {provider: up, model: backup, priority: 1, weight: 100}
""",
        ROUTING_10,
    )
    firsts: Counter[str] = Counter()
    for _ in range(RUNS):
        plan = r.plan("smart")
        models = [a.model for a in plan]
        firsts[models[0]] += 1
        # Both priority-0 targets come before the priority-1 one, whatever its weight.
        assert sorted(models[:2]) == ["heavy", "light"]
        assert models[2:] == ["backup", "backup"]
    assert firsts["heavy"] / RUNS == pytest.approx(0.75, abs=TOLERANCE)
    assert firsts["light"] / RUNS == pytest.approx(0.25, abs=TOLERANCE)


def test_every_order_of_three_targets_has_its_weighted_probability() -> None:
    weights = {"a": 1, "b": 2, "c": 3}
    r = router(
        "  - name: smart\n    targets:\n"
        + "".join(
            f"      - {{provider: mock, model: {m}, weight: {w}}}\n" for m, w in weights.items()
        ),
        ROUTING_10,
    )
    orders = Counter(tuple(a.model for a in r.plan("smart")) for _ in range(RUNS))
    total = sum(weights.values())
    for order in itertools.permutations(weights):
        first, second, _ = order
        expected = weights[first] / total * weights[second] / (total - weights[first])
        assert orders[order] / RUNS == pytest.approx(expected, abs=TOLERANCE), order
    assert sum(orders.values()) == RUNS


def test_keys_of_a_provider_are_drawn_by_weight() -> None:
    r = router("  - name: smart\n    targets: [{provider: up, model: gpt}]\n", ROUTING_10)
    firsts: Counter[str | None] = Counter()
    for _ in range(RUNS):
        plan = r.plan("smart")
        keys = [where(a)[1] for a in plan]
        assert sorted(keys, key=str) == ["up-a", "up-b"]  # each key once
        firsts[keys[0]] += 1
    assert firsts["up-a"] / RUNS == pytest.approx(0.75, abs=TOLERANCE)
    assert firsts["up-b"] / RUNS == pytest.approx(0.25, abs=TOLERANCE)


def test_equal_key_weights_are_drawn_uniformly() -> None:
    r = router("  - name: smart\n    targets: [{provider: third, model: gpt}]\n", ROUTING_10)
    firsts = Counter(where(r.plan("smart")[0])[1] for _ in range(RUNS))
    for key in ("third-a", "third-b", "third-c"):
        assert firsts[key] / RUNS == pytest.approx(1 / 3, abs=TOLERANCE)


def test_every_key_of_a_target_is_tried_before_the_next_target() -> None:
    r = router(
        """
  - name: smart
    targets:
      - {provider: up, model: gpt-up}
      - {provider: third, model: gpt-third}
      - {provider: alt, model: gpt-alt}
""",
        ROUTING_10,
    )
    seen_orders = set()
    for _ in range(200):
        plan = r.plan("smart")
        assert len(plan) == 6  # 2 + 3 + 1 keys
        order = providers_of(plan)
        assert sorted(order) == ["alt", "third", "up"]  # each target one contiguous run
        seen_orders.add(tuple(order))
        for attempt in plan:
            assert attempt.model == f"gpt-{attempt.provider.name}"
        assert len({where(a) for a in plan}) == 6  # no key twice
    assert len(seen_orders) == 6  # and the targets themselves are shuffled


@pytest.mark.parametrize("cap", [1, 2, 3, 4, 5, 6, 7])
def test_plan_stops_at_max_attempts(cap: int) -> None:
    models = """
  - name: smart
    targets:
      - {provider: up, model: first}
      - {provider: third, model: second, priority: 1}
      - {provider: alt, model: third, priority: 2}
"""
    full = router(models, ROUTING_10, seed=7).plan("smart")
    capped = router(models, f"routing: {{max_attempts: {cap}}}\n", seed=7).plan("smart")
    assert len(full) == 6
    assert len(capped) == min(cap, 6)
    assert [where(a) for a in capped] == [where(a) for a in full[:cap]]


def test_default_max_attempts_is_four() -> None:
    r = router(
        "  - name: smart\n    targets:\n      - {provider: up, model: a}\n"
        "      - {provider: third, model: b}\n"
    )
    assert len(r.plan("smart")) == 4


def test_provider_without_keys_gets_one_attempt_with_no_key() -> None:
    r = router("  - name: smart\n    targets: [{provider: mock, model: mock}]\n", ROUTING_10)
    (attempt,) = r.plan("smart")
    assert attempt.key is None
    assert attempt.provider.name == "mock"
    assert isinstance(attempt.adapter, MockAdapter)
    assert attempt.model == "mock"


def test_attempt_carries_the_provider_adapter_key_and_api() -> None:
    r = router("  - name: smart\n    targets: [{provider: alt, model: gpt-4.1, api: responses}]\n")
    (attempt,) = r.plan("smart")
    assert isinstance(attempt.adapter, OpenAIAdapter)
    assert where(attempt) == ("alt", "alt-a")
    assert (attempt.model, attempt.api) == ("gpt-4.1", "responses")


def test_the_same_provider_in_two_targets_offers_its_keys_again() -> None:
    r = router(
        "  - name: smart\n    targets:\n      - {provider: up, model: a}\n"
        "      - {provider: up, model: b, priority: 1}\n",
        ROUTING_10,
    )
    plan = r.plan("smart")
    assert [a.model for a in plan] == ["a", "a", "b", "b"]
    assert {where(a)[1] for a in plan[:2]} == {where(a)[1] for a in plan[2:]} == {"up-a", "up-b"}


# --- addressing -------------------------------------------------------------------------------

SMART = "  - name: smart\n    targets: [{provider: alt, model: gpt-smart}]\n"


@pytest.mark.parametrize(
    ("model", "provider", "upstream"),
    [
        ("up/gpt-4o", "up", "gpt-4o"),
        ("alt/gpt-4o-mini", "alt", "gpt-4o-mini"),
        ("mock/anything", "mock", "anything"),
        ("up/meta-llama/Llama-3", "up", "meta-llama/Llama-3"),
        ("up/org/family/v1:latest", "up", "org/family/v1:latest"),
    ],
)
def test_provider_slash_model_addresses_a_configured_provider(
    model: str, provider: str, upstream: str
) -> None:
    plan = router(SMART, ROUTING_10).plan(model)
    assert plan
    assert {a.provider.name for a in plan} == {provider}
    assert {a.model for a in plan} == {upstream}
    assert {a.api for a in plan} == {"chat"}


def test_provider_slash_model_tries_every_key_of_that_provider() -> None:
    plan = router(SMART, ROUTING_10).plan("third/gpt")
    assert sorted(where(a)[1] or "" for a in plan) == ["third-a", "third-b", "third-c"]


def test_configured_model_name_wins_over_provider_slash_model() -> None:
    r = router(
        SMART + "  - name: up/gpt-4o\n    targets: [{provider: mock, model: pinned}]\n",
        ROUTING_10,
    )
    (attempt,) = r.plan("up/gpt-4o")
    assert (attempt.provider.name, attempt.model) == ("mock", "pinned")
    # Other models of that provider are still addressable directly.
    assert {a.model for a in r.plan("up/gpt-4.1")} == {"gpt-4.1"}


@pytest.mark.parametrize(
    "model",
    [
        "nope",
        "",
        "gpt-smart",  # a target's upstream id is not a model name
        "up",  # a provider name alone
        "up/",  # no model after the slash
        "/gpt-4o",  # no provider before it
        "nobody/gpt-4o",  # not a configured provider
        "meta-llama/Llama-3",  # an upstream id with a slash, but no such provider
        "Smart",  # names are case-sensitive
        "smart/x",  # a model name is not a provider
    ],
)
def test_unknown_model_is_a_404_on_param_model(model: str) -> None:
    r = router(SMART, ROUTING_10)
    with pytest.raises(UnknownModel) as info:
        r.plan(model)
    err = info.value
    assert err.status == 404
    assert err.param == "model"
    assert err.code == "model_not_found"
    assert err.type == "invalid_request_error"
    assert f"'{model}'" in err.message


# --- /v1/models -------------------------------------------------------------------------------


def test_model_list_names_then_their_targets_without_duplicates() -> None:
    r = router(
        """
  - name: smart
    targets:
      - {provider: up, model: gpt-a}
      - {provider: alt, model: gpt-b, priority: 1}
  - name: fast
    targets:
      - {provider: up, model: gpt-a}
      - {provider: mock, model: mock}
  - name: mock
    targets: [{provider: mock, model: mock}]
"""
    )
    listing = r.model_list()
    assert listing.object == "list"
    assert [(m.id, m.owned_by) for m in listing.data] == [
        ("smart", "gateway"),
        ("up/gpt-a", "up"),
        ("alt/gpt-b", "alt"),
        ("fast", "gateway"),
        ("mock/mock", "mock"),
        ("mock", "gateway"),
    ]
    assert {m.object for m in listing.data} == {"model"}


def test_model_list_has_no_duplicate_when_a_name_looks_like_a_target() -> None:
    r = router(
        """
  - name: smart
    targets: [{provider: up, model: gpt-a}]
  - name: up/gpt-a
    targets: [{provider: alt, model: gpt-b}]
"""
    )
    ids = [m.id for m in r.model_list().data]
    assert ids == ["smart", "up/gpt-a", "alt/gpt-b"]


def test_every_listed_model_can_be_planned() -> None:
    r = router(SMART + "  - name: other\n    targets: [{provider: third, model: x/y}]\n")
    for card in r.model_list().data:
        assert r.plan(card.id)


# --- weighted_order ---------------------------------------------------------------------------


@given(
    weights=st.lists(st.integers(min_value=1, max_value=1000), max_size=12),
    seed=st.integers(min_value=0, max_value=2**32),
)
def test_weighted_order_is_a_permutation(weights: list[int], seed: int) -> None:
    items = [f"item-{i}" for i in range(len(weights))]
    out = weighted_order(items, weights, random.Random(seed))
    assert sorted(out) == sorted(items)
    assert len(out) == len(items)


def test_weighted_order_keeps_equal_items_apart() -> None:
    out = weighted_order(["x", "x", "y"], [1, 1, 1], random.Random(3))
    assert sorted(out) == ["x", "x", "y"]


def test_weighted_order_does_not_touch_its_inputs() -> None:
    items, weights = ["a", "b", "c"], [5, 1, 1]
    weighted_order(items, weights, random.Random(1))
    assert (items, weights) == (["a", "b", "c"], [5, 1, 1])


def test_weighted_order_needs_one_weight_per_item() -> None:
    with pytest.raises(ValueError, match="zip"):
        weighted_order(["a", "b"], [1], random.Random(0))


def test_weighted_order_of_nothing_is_empty() -> None:
    assert weighted_order([], [], random.Random(0)) == []


# --- context-window fallbacks -----------------------------------------------------------------

WINDOWS = """
  - name: m
    targets:
      - {provider: up, model: small, context_window: 8000, priority: 0}
      - {provider: alt, model: unknown-model, priority: 1}
      - {provider: third, model: gpt-4o, priority: 2}
      - {provider: alt, model: huge, context_window: 2000000, priority: 3}
    fallbacks: {context_window: [big]}
  - name: big
    targets: [{provider: mock, model: gpt-4.1}]
"""


def test_a_context_error_keeps_only_larger_known_windows_then_the_fallback_models() -> None:
    r = router(WINDOWS, ROUTING_10)
    plan = r.plan("m")
    failed, rest = plan[0], plan[1:]
    assert [r.context_window(a) for a in plan[:1]] == [8000]
    wider = r.wider("m", failed, rest, made=1)
    # the other key of the same target and the model of unknown window are dropped; gpt-4o
    # comes from the shipped table (128000); the fallback model's target follows the plan's
    assert [(a.provider.name, a.model) for a in wider] == [
        ("third", "gpt-4o"),
        ("third", "gpt-4o"),
        ("third", "gpt-4o"),
        ("alt", "huge"),
        ("mock", "gpt-4.1"),
    ]
    # a second context error, from gpt-4o: only the larger ones stay
    again = r.wider("m", wider[0], wider[3:], made=2)
    assert [(a.provider.name, a.model) for a in again] == [("alt", "huge"), ("mock", "gpt-4.1")]


def test_context_fallbacks_look_past_the_plans_length_and_stay_within_max_attempts() -> None:
    r = router(WINDOWS, "routing: {max_attempts: 3}\n")
    plan = r.plan("m")
    assert [a.provider.name for a in plan] == ["up", "up", "alt"]  # cut at 3
    # the larger targets the plan's length left out are found; two attempts remain
    wider = r.wider("m", plan[0], plan[1:], made=1)
    assert [(a.provider.name, a.model) for a in wider] == [("third", "gpt-4o")] * 2
    assert r.wider("m", plan[0], plan[1:], made=3) == []
