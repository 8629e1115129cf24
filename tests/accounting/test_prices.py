"""The shipped price table, its lookup of the names upstreams use, and cost arithmetic."""

from __future__ import annotations

import json
from decimal import ROUND_HALF_UP
from decimal import Decimal
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.accounting.prices import FREE
from gateway.accounting.prices import ModelPrice
from gateway.accounting.prices import PriceTable
from gateway.accounting.prices import cost_nanos
from gateway.accounting.prices import most_cost_nanos
from gateway.accounting.prices import nanos_of_usd
from gateway.accounting.prices import usd_text
from gateway.config import Price
from gateway.wire.openai_chat import CompletionTokensDetails
from gateway.wire.openai_chat import PromptTokensDetails
from gateway.wire.openai_chat import Usage

TABLE = PriceTable.shipped()


def test_every_entry_names_its_source_and_date() -> None:
    raw = resources.files("gateway.accounting").joinpath("prices.json").read_text("utf-8")
    rows = json.loads(raw)["models"]
    assert len(rows) >= 20
    for row in rows:
        assert row["source"].startswith("https://"), row
        assert len(row["date"]) == 10, row
        for field in ("input", "output", "cached_input", "reasoning_output"):
            if field in row:
                assert Decimal(row[field]) >= 0


@pytest.mark.parametrize(
    ("name", "kind", "base"),
    [
        ("gpt-4.1", "openai", "gpt-4.1"),
        ("gpt-4.1-2025-04-14", "openai", "gpt-4.1"),
        ("gpt-4.1-mini-2025-04-14", "azure", "gpt-4.1-mini"),
        ("openai/gpt-4o-mini", "openai", "gpt-4o-mini"),
        ("claude-sonnet-4-5-20250929", "anthropic", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5@20250929", "vertex", "claude-sonnet-4-5"),
        ("us.anthropic.claude-sonnet-4-5-20250929-v1:0", "bedrock", "claude-sonnet-4-5"),
        ("anthropic.claude-3-haiku-20240307-v1:0", "bedrock", "claude-3-haiku"),
        ("models/gemini-2.5-pro", "gemini", "gemini-2.5-pro"),
        ("gemini-2.5-flash-preview-09-2025", "gemini", "gemini-2.5-flash"),
        ("gemini-2.5-flash-lite", "gemini", "gemini-2.5-flash-lite"),
        ("o3-pro-2025-06-10", "openai", "o3-pro"),
        ("claude-3-5-haiku-latest", "anthropic", "claude-3-5-haiku"),
    ],
)
def test_lookup_finds_the_base_entry(name: str, kind: str, base: str) -> None:
    assert TABLE.lookup(name, kind) == TABLE.lookup(base)
    assert TABLE.lookup(base) is not None


def test_self_hosted_kinds_are_free_and_unknown_models_unpriced() -> None:
    assert TABLE.lookup("llama3.2", "ollama") is FREE
    assert TABLE.lookup("anything", "mock") is FREE
    assert TABLE.lookup("my-finetune", "openai") is None
    assert TABLE.lookup("gpt-4.10", "openai") is None  # no `-` boundary: not gpt-4.1


def test_cost_splits_cached_and_reasoning_tokens() -> None:
    price = ModelPrice(
        input=Decimal("2"),
        output=Decimal("8"),
        cached_input=Decimal("0.5"),
        reasoning_output=Decimal("3.5"),
    )
    usage = Usage(
        prompt_tokens=1000,
        completion_tokens=300,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=400),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=100),
    )
    # 600*2 + 400*0.5 + 200*8 + 100*3.5 microdollars = 3350 us
    assert cost_nanos(usage, price) == 3_350_000
    assert usd_text(cost_nanos(usage, price)) == "0.003350000"


def test_cost_of_a_sub_nanodollar_price_rounds_once_per_request() -> None:
    price = TABLE.lookup("gemini-2.0-flash-lite")
    assert price is not None
    # 0.075 USD/Mtok = 75 nanodollars a token; 3 tokens = 225
    assert cost_nanos(Usage(prompt_tokens=3), price) == 225
    cached = TABLE.lookup("gpt-5-nano")
    assert cached is not None
    # 0.005 USD/Mtok cached = 5 nanodollars a token
    usage = Usage(prompt_tokens=10, prompt_tokens_details=PromptTokensDetails(cached_tokens=10))
    assert cost_nanos(usage, cached) == 50


def test_config_override_reads_floats_by_their_shortest_repr() -> None:
    price = ModelPrice.of(Price(input_per_mtok=0.1, output_per_mtok=0.3))
    assert price.input == Decimal("0.1")
    assert cost_nanos(Usage(prompt_tokens=1, completion_tokens=1), price) == 400
    assert nanos_of_usd(0.000001) == 1000
    assert nanos_of_usd(5) == 5_000_000_000


def test_shipped_prices_for_known_models() -> None:
    gpt41 = TABLE.lookup("gpt-4.1")
    assert gpt41 is not None
    usage = Usage(prompt_tokens=1_000_000, completion_tokens=1_000_000)
    assert usd_text(cost_nanos(usage, gpt41)) == "10.000000000"


def test_the_most_a_request_can_cost_prices_output_at_the_dearer_rate() -> None:
    price = TABLE.lookup("gemini-2.5-flash-preview-04-17")
    assert price is not None
    assert price.reasoning_output == Decimal("3.50")
    # 100 prompt tokens at 0.15 + 10 output tokens at 3.50 microdollars
    assert most_cost_nanos(100, 10, price) == 50_000
    reasoning = Usage(
        prompt_tokens=100,
        completion_tokens=10,
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=10),
    )
    assert cost_nanos(reasoning, price) == most_cost_nanos(100, 10, price)


PRICES = st.decimals(min_value=0, max_value=1000, places=7, allow_nan=False)
TOKENS = st.integers(min_value=0, max_value=10**9)


@given(
    prices=st.tuples(PRICES, PRICES, st.none() | PRICES, st.none() | PRICES),
    tokens=st.tuples(TOKENS, TOKENS, TOKENS, TOKENS),
)
def test_costs_are_the_exact_decimal_arithmetic_rounded_half_up_once(
    prices: tuple[Decimal, Decimal, Decimal | None, Decimal | None],
    tokens: tuple[int, int, int, int],
) -> None:
    """The integer arithmetic the hot path uses gives what Decimal gives (the contract)."""
    price = ModelPrice(*prices)
    prompt, completion, cached, reasoning = tokens
    cached, reasoning = min(cached, prompt), min(reasoning, completion)
    usage = Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        completion_tokens_details=CompletionTokensDetails(reasoning_tokens=reasoning),
    )
    cached_price = price.input if price.cached_input is None else price.cached_input
    reasoning_price = price.output if price.reasoning_output is None else price.reasoning_output
    micro = (
        (prompt - cached) * price.input
        + cached * cached_price
        + (completion - reasoning) * price.output
        + reasoning * reasoning_price
    )
    assert cost_nanos(usage, price) == int((micro * 1000).to_integral_value(ROUND_HALF_UP))
    most = prompt * price.input + completion * max(price.output, reasoning_price)
    assert most_cost_nanos(prompt, completion, price) == int(
        (most * 1000).to_integral_value(ROUND_HALF_UP)
    )


@given(st.integers(min_value=-(10**15), max_value=10**15))
def test_usd_text_is_the_exact_decimal(nanos: int) -> None:
    text = usd_text(nanos)
    assert Decimal(text) == Decimal(nanos).scaleb(-9)
    assert len(text.partition(".")[2]) == 9


def test_a_price_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        ModelPrice.of(Price(input_per_mtok=float("inf"), output_per_mtok=1.0))
