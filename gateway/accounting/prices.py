"""Prices: the shipped table (prices.json, in this package), config overrides, and the cost
of one request's usage in integer nanodollars.

A price is USD per million tokens, which is the same number as microdollars per token; a
cost is kept as an integer count of nanodollars (1e-9 USD): exact, summable by any store
(redis counters and sqlite integers), and a thousand times finer than the microdollar the
contract asks for. Arithmetic is Decimal, rounded half-up to the nanodollar once per request.

Lookup takes what an upstream or a config calls a model and finds its table entry: a
provider prefix (`openai/gpt-4.1`, `models/gemini-2.5-pro`), what the kind's spec strips
(`ProviderSpec.price_id`: a Bedrock region and vendor prefix and version suffix), a
`@date` and a dated id (`gpt-4.1-2025-04-14`, `claude-sonnet-4-5-20250929`) all resolve to
the base entry; failing that, the longest table id that the name extends at a `-` boundary
(`gemini-2.5-flash-preview-09-2025` -> `gemini-2.5-flash`). The models of a self-hosted kind
(`ProviderSpec.self_hosted`) are free; anything else not found has no price (cost 0, and
the caller logs it once).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from dataclasses import field
from decimal import ROUND_HALF_UP
from decimal import Decimal
from importlib import resources
from typing import Any

from gateway.config import Price
from gateway.providers.registry import spec_of
from gateway.wire.openai_chat import UNSET
from gateway.wire.openai_chat import Usage

NANOS_PER_USD = 10**9
# USD per Mtok == microdollars per token == 1000 nanodollars per token
_NANOS_PER_TOKEN_PER_MTOK_PRICE = Decimal(1000)
DATED_SUFFIX = re.compile(r"(@\d{8}|-\d{4}-\d{2}-\d{2}|-\d{8}|-latest)$")


@dataclass(frozen=True, slots=True)
class ModelPrice:
    """USD per million tokens; None for cached input or reasoning: priced as input/output."""

    input: Decimal
    output: Decimal
    cached_input: Decimal | None = None
    reasoning_output: Decimal | None = None
    source: str = ""
    date: str = ""
    # The four prices as integers over one denominator (nanodollars per token is
    # `rates[i] / scale`): a cost is then integer arithmetic, exact like the Decimal one
    # and a fraction of its time on the path of every request.
    rates: tuple[int, int, int, int] = field(init=False, repr=False, compare=False)
    scale: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        cached = self.input if self.cached_input is None else self.cached_input
        reasoning = self.output if self.reasoning_output is None else self.reasoning_output
        nanos = [p * _NANOS_PER_TOKEN_PER_MTOK_PRICE for p in (self.input, cached)]
        nanos += [p * _NANOS_PER_TOKEN_PER_MTOK_PRICE for p in (self.output, reasoning)]
        if not all(n.is_finite() for n in nanos):
            raise ValueError(f"a price must be a finite number of USD per Mtok: {self}")
        places = max(0, *(-int(n.as_tuple().exponent) for n in nanos))
        scale = 10**places
        ints = [int(n.scaleb(places)) for n in nanos]
        object.__setattr__(self, "rates", (ints[0], ints[1], ints[2], ints[3]))
        object.__setattr__(self, "scale", scale)

    @classmethod
    def of(cls, price: Price) -> ModelPrice:
        """A config `models[].price` (floats, read through their shortest repr)."""
        cached, reasoning = price.cached_input_per_mtok, price.reasoning_output_per_mtok
        return cls(
            input=Decimal(repr(price.input_per_mtok)),
            output=Decimal(repr(price.output_per_mtok)),
            cached_input=None if cached is None else Decimal(repr(cached)),
            reasoning_output=None if reasoning is None else Decimal(repr(reasoning)),
            source="config",
        )


FREE = ModelPrice(input=Decimal(0), output=Decimal(0), source="self-hosted")


def _clamp(value: int | Any, top: int) -> int:
    if not isinstance(value, int) or value < 0:
        return 0
    return min(value, top)


def _nanos(scaled: int, scale: int) -> int:
    """`scaled / scale` rounded half away from zero (Decimal's ROUND_HALF_UP)."""
    if scaled < 0:
        return -_nanos(-scaled, scale)
    return (2 * scaled + scale) // (2 * scale)


def cost_nanos(usage: Usage, price: ModelPrice) -> int:
    """The cost of `usage` at `price`. Usage follows OpenAI's convention: cached tokens are
    part of prompt_tokens and reasoning tokens part of completion_tokens."""
    prompt = max(usage.prompt_tokens, 0)
    completion = max(usage.completion_tokens, 0)
    details = usage.prompt_tokens_details
    cached = 0
    if details is not UNSET and details is not None:
        cached = _clamp(details.cached_tokens, prompt)
    out_details = usage.completion_tokens_details
    reasoning = 0
    if out_details is not UNSET and out_details is not None:
        reasoning = _clamp(out_details.reasoning_tokens, completion)
    input_rate, cached_rate, output_rate, reasoning_rate = price.rates
    scaled = (
        (prompt - cached) * input_rate
        + cached * cached_rate
        + (completion - reasoning) * output_rate
        + reasoning * reasoning_rate
    )
    return _nanos(scaled, price.scale)


def most_cost_nanos(input_tokens: int, output_tokens: int, price: ModelPrice) -> int:
    """The most these token counts can cost: no cache hit, and every output token at the
    dearer of the output and reasoning prices (what a reservation must cover)."""
    input_rate, _, output_rate, reasoning_rate = price.rates
    scaled = input_tokens * input_rate + output_tokens * max(output_rate, reasoning_rate)
    return _nanos(scaled, price.scale)


def usd(nanos: int) -> Decimal:
    """Nanodollars as USD, exact."""
    return Decimal(nanos).scaleb(-9)


def usd_text(nanos: int) -> str:
    """Nanodollars as a plain decimal USD string (`0.000123450`), never in exponent form."""
    sign = "-" if nanos < 0 else ""
    whole, fraction = divmod(abs(nanos), NANOS_PER_USD)
    return f"{sign}{whole}.{fraction:09d}"


def nanos_of_usd(value: float | int | str | Decimal) -> int:
    """A USD amount from config or the admin API as nanodollars (floats by their repr)."""
    if isinstance(value, Decimal):
        amount = value
    else:
        amount = Decimal(repr(value) if isinstance(value, float) else str(value))
    return int((amount * NANOS_PER_USD).to_integral_value(ROUND_HALF_UP))


def normalize(model: str, kind: str | None = None) -> str:
    """The table's name for upstream model id `model`: lower case, without a provider
    prefix, then as the kind's spec names it (`ProviderSpec.price_id`)."""
    name = model.strip().lower().rpartition("/")[2]
    spec = spec_of(kind) if kind is not None else None
    return spec.price_id(name) if spec is not None else name


class PriceTable:
    """The shipped table; a self-hosted kind's models (`ProviderSpec.self_hosted`) are free."""

    def __init__(self, entries: dict[str, ModelPrice]) -> None:
        self._entries = entries
        self._by_length = sorted(entries, key=len, reverse=True)
        # every request looks its price up: the answer for a (model, kind) never changes,
        # and the names come from the config and upstream answers (bounded below anyway)
        self._found: dict[tuple[str, str | None], ModelPrice | None] = {}

    @classmethod
    def shipped(cls) -> PriceTable:
        text = resources.files("gateway.accounting").joinpath("prices.json").read_text("utf-8")
        data = json.loads(text)
        entries = {
            row["model"]: ModelPrice(
                input=Decimal(row["input"]),
                output=Decimal(row["output"]),
                cached_input=_decimal_or_none(row.get("cached_input")),
                reasoning_output=_decimal_or_none(row.get("reasoning_output")),
                source=row["source"],
                date=row["date"],
            )
            for row in data["models"]
        }
        return cls(entries)

    def lookup(self, model: str, kind: str | None = None) -> ModelPrice | None:
        """The price of upstream model id `model` served by a provider of `kind`."""
        key = (model, kind)
        try:
            return self._found[key]
        except KeyError:
            pass
        found = self._lookup(model, kind)
        if len(self._found) >= 4096:
            self._found.clear()
        self._found[key] = found
        return found

    def _lookup(self, model: str, kind: str | None) -> ModelPrice | None:
        spec = spec_of(kind) if kind is not None else None
        if spec is not None and spec.self_hosted:
            return FREE
        name = normalize(model, kind)
        found = self._entries.get(name)
        if found is not None:
            return found
        undated = DATED_SUFFIX.sub("", name)
        found = self._entries.get(undated)
        if found is not None:
            return found
        for known in self._by_length:
            if undated.startswith(known + "-"):
                return self._entries[known]
        return None


def _decimal_or_none(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)
