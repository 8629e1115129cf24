"""Which upstream attempts a request gets, in order: model -> targets -> keys.

A model name is a configured model, or `<provider>/<model>` for any configured provider.
Targets are tried by priority (lowest first); targets of one priority, and the keys of one
provider, are ordered by a weighted random draw, so load spreads by weight and a failure
moves on to the rest. Key health, cooldowns and rpm windows arrive with the balancer.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TypeVar

import msgspec

from gateway.config import Config, ProviderConfig, ProviderKey, Target
from gateway.errors import UnknownModel
from gateway.providers.base import ProviderAdapter
from gateway.wire.openai_chat import ModelCard, ModelList

T = TypeVar("T")


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One upstream try: a provider, one of its keys, and the upstream model id."""

    provider: ProviderConfig
    adapter: ProviderAdapter
    key: ProviderKey | None
    model: str
    api: str = "chat"


def weighted_order(items: Sequence[T], weights: Sequence[int], rng: random.Random) -> list[T]:
    """`items` in a random order where each next item is drawn with probability ~ its weight."""
    pool = list(zip(items, weights, strict=True))
    out: list[T] = []
    while pool:
        total = sum(w for _, w in pool)
        pick = rng.random() * total
        for i, (item, weight) in enumerate(pool):
            pick -= weight
            if pick < 0 or i == len(pool) - 1:
                out.append(item)
                del pool[i]
                break
    return out


class Router:
    def __init__(
        self,
        config: Config,
        adapters: dict[str, ProviderAdapter],
        rng: random.Random | None = None,
    ) -> None:
        self._providers = {p.name: p for p in config.providers}
        self._adapters = adapters
        self._models = {m.name: list(m.targets) for m in config.models}
        self._emulated = frozenset(m.name for m in config.models if m.tools == "emulate")
        self._max_attempts = config.routing.max_attempts
        self._rng = rng or random.Random()
        self._fixed: dict[str, list[Attempt]] = {}

    def targets(self, model: str) -> list[Target]:
        targets = self._models.get(model)
        if targets is not None:
            return targets
        provider, sep, upstream_model = model.partition("/")
        if sep and upstream_model and provider in self._providers:
            return [Target(provider=provider, model=upstream_model)]
        raise UnknownModel(
            f"The model '{model}' does not exist or is not served here", param="model"
        )

    def emulates_tools(self, model: str) -> bool:
        """True for a configured model with `tools: emulate` (its upstream takes no tools)."""
        return model in self._emulated

    def plan(self, model: str) -> list[Attempt]:
        """Every attempt this request may make, in order, at most `routing.max_attempts`.

        A model whose plan has no choice in it (one target, at most one key) always gets the
        same plan: it is built once and shared (callers only read it)."""
        fixed = self._fixed.get(model)
        if fixed is not None:
            return fixed
        targets = self.targets(model)
        attempts = self._draw(targets)
        fixed_plan = len(targets) == 1 and len(self._providers[targets[0].provider].keys) <= 1
        if fixed_plan and len(self._fixed) < 4096:  # bounded: provider/model come from clients
            self._fixed[model] = attempts
        return attempts

    def _draw(self, targets: list[Target]) -> list[Attempt]:
        attempts: list[Attempt] = []
        for priority in sorted({t.priority for t in targets}):
            tier = [t for t in targets if t.priority == priority]
            for target in weighted_order(tier, [t.weight for t in tier], self._rng):
                provider = self._providers[target.provider]
                adapter = self._adapters[provider.name]
                keys: list[ProviderKey | None] = list(provider.keys) or [None]
                if len(keys) > 1:
                    weights = [k.weight if k is not None else 1 for k in keys]
                    keys = weighted_order(keys, weights, self._rng)
                for key in keys:
                    attempts.append(
                        Attempt(
                            provider=provider,
                            adapter=adapter,
                            key=key,
                            model=target.model,
                            api=target.api,
                        )
                    )
                    if len(attempts) >= self._max_attempts:
                        return attempts
        return attempts

    def model_list(self) -> ModelList:
        """Configured model names, then `provider/model` for every target."""
        cards: dict[str, ModelCard] = {}
        for name, targets in self._models.items():
            cards[name] = ModelCard(id=name, owned_by="gateway")
            for t in targets:
                full = f"{t.provider}/{t.model}"
                cards.setdefault(full, ModelCard(id=full, owned_by=t.provider))
        return ModelList(data=list(cards.values()))
