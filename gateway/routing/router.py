"""Which upstream attempts a request gets, in order: model -> targets -> keys.

A model name is a configured model, or `<provider>/<model>` for any configured provider.
Targets are tried by priority (lowest first). Within one priority the targets, and within one
target the provider's keys, are ordered by `routing.strategy` (balancer.py) among those whose
`KeyHealth` lets them be tried now: every key of a target comes before the next target, every
target of a priority before the next priority. A plan with nothing healthy in it is a 503 (a
429 when only rate limits stand in the way) with `Retry-After`.

The router owns one `KeyHealth` per configured key (keyless providers: one for the
endpoint), the routing metrics, and the transition events that log and share key health.
A router built for a reloaded config (`previous=`) takes over the previous one's metrics,
events and the `KeyHealth` of every key that still exists (same provider name, same
credentials: `carry_identity`), so cooldowns, circuits, rate windows, latency averages and
in-flight counts go on; a key whose secret changed is a new key.
"""

from __future__ import annotations

import hashlib
import random
import time

import msgspec

from gateway.config import Config
from gateway.config import ProviderConfig
from gateway.config import ProviderKey
from gateway.config import Recovery
from gateway.config import Target
from gateway.errors import BadRequest
from gateway.errors import GatewayError
from gateway.errors import UnknownModel
from gateway.observability.metrics import GatewayMetrics
from gateway.providers.base import ProviderAdapter
from gateway.providers.base import has_dot_segment
from gateway.routing.balancer import key_score
from gateway.routing.balancer import strategy_order
from gateway.routing.balancer import unavailable
from gateway.routing.balancer import weighted_order
from gateway.routing.context_windows import context_window_of
from gateway.routing.events import HealthEvents
from gateway.routing.health import HealthPolicy
from gateway.routing.health import KeyHealth
from gateway.wire.openai_chat import ModelCard
from gateway.wire.openai_chat import ModelList

__all__ = ["Attempt", "KeySlot", "Router", "carry_identity", "fingerprint", "weighted_order"]


class Attempt(msgspec.Struct, frozen=True, kw_only=True):
    """One upstream try: a provider, one of its keys (and that key's health), the upstream
    model id."""

    provider: ProviderConfig
    adapter: ProviderAdapter
    key: ProviderKey | None
    model: str
    health: KeyHealth
    metrics: GatewayMetrics
    api: str = "chat"


class KeySlot(msgspec.Struct, frozen=True):
    key: ProviderKey | None
    health: KeyHealth
    weight: int


def fingerprint(key: ProviderKey | None, length: int = 8) -> str:
    """The first hex digits of the sha256 of the key's credential: names a key without
    showing it. `-` for a provider without keys."""
    if key is None:
        return "-"
    return hashlib.sha256(key.identity().encode()).hexdigest()[:length]


def carry_identity(provider: str, key: ProviderKey | None) -> str:
    """What makes a key the same key across a reload: its provider's name and every
    credential it holds (hashed: the identity is kept in memory only, never shown)."""
    if key is None:
        return f"{provider}:-"
    parts = [key.identity(), *(s.reveal() for s in key.secrets())]
    return f"{provider}:{hashlib.sha256(chr(0).join(parts).encode()).hexdigest()}"


class Router:
    def __init__(
        self,
        config: Config,
        adapters: dict[str, ProviderAdapter],
        rng: random.Random | None = None,
        metrics: GatewayMetrics | None = None,
        previous: Router | None = None,
    ) -> None:
        self._providers = {p.name: p for p in config.providers}
        self._adapters = adapters
        self._models = {m.name: list(m.targets) for m in config.models}
        # a configured name with a dot segment is left to `targets`, which refuses it, so
        # that every route answers it alike
        self._tiers = {
            name: _tiers(targets)
            for name, targets in self._models.items()
            if not has_dot_segment(name)
        }
        # context-window fallbacks: configured windows, and the models to move to
        self._windows = {
            (t.provider, t.model): t.context_window
            for m in config.models
            for t in m.targets
            if t.context_window is not None
        }
        self._wider_models = {
            m.name: list(m.fallbacks.context_window)
            for m in config.models
            if m.fallbacks is not None and m.fallbacks.context_window
        }
        self._emulated = frozenset(m.name for m in config.models if m.tools == "emulate")
        self._recovery = {
            m.name: m.recovery
            for m in config.models
            if m.recovery is not None and m.recovery.mode != "off"
        }
        self._max_attempts = config.routing.max_attempts
        self._strategy = config.routing.strategy
        self._rng = rng or random.Random()
        self._fixed: dict[str, list[Attempt]] = {}
        self._cache_targets: dict[str, list[str]] = {}
        if previous is not None:
            metrics = previous.metrics
        self.metrics: GatewayMetrics = metrics or GatewayMetrics(models=frozenset(self._models))
        self.events: HealthEvents = (
            previous.events if previous is not None else HealthEvents(self.metrics)
        )
        policy = HealthPolicy.of(config.routing)
        carried: dict[str, list[KeyHealth]] = {}
        if previous is not None:
            for name, slots in previous.slots.items():
                for slot in slots:
                    identity = carry_identity(name, slot.key)
                    carried.setdefault(identity, []).append(slot.health)
        self.slots: dict[str, list[KeySlot]] = {}
        for p in config.providers:
            keys: list[ProviderKey | None] = list(p.keys) or [None]
            self.slots[p.name] = [self._slot(p, key, policy, carried) for key in keys]

    def _slot(
        self,
        p: ProviderConfig,
        key: ProviderKey | None,
        policy: HealthPolicy,
        carried: dict[str, list[KeyHealth]],
    ) -> KeySlot:
        label = key.name if key is not None and key.name else fingerprint(key)
        rpm = key.rpm if key is not None else None
        tpm = key.tpm if key is not None else None
        same = carried.get(carry_identity(p.name, key))
        if same:
            health = same.pop(0)
            health.reconfigure(label, policy, rpm=rpm, tpm=tpm)
            return KeySlot(key, health, key.weight if key is not None else 1)
        health = KeyHealth(
            p.name,
            label,
            policy,
            rpm=rpm,
            tpm=tpm,
            store_key=f"health:{p.name}:{fingerprint(key, 16)}",
        )
        health.on_change = self.events
        return KeySlot(key, health, key.weight if key is not None else 1)

    @property
    def models(self) -> dict[str, list[Target]]:
        """The configured models and their targets (read only)."""
        return self._models

    def provider_models(self, provider: str) -> set[str]:
        """The upstream model ids configured targets use on `provider`."""
        return {t.model for ts in self._models.values() for t in ts if t.provider == provider}

    def targets(self, model: str) -> list[Target]:
        """The targets of `model`; a 400 for a name with a path dot segment in it, before
        any lookup: no upstream path is ever built from one, and an unknown `..` is the
        same probe as a known one."""
        if has_dot_segment(model):
            raise BadRequest(
                f"The model '{model}' is not a valid model id (a path dot segment)",
                param="model",
                code="invalid_model",
            )
        targets = self._models.get(model)
        if targets is not None:
            return targets
        provider, sep, upstream_model = model.partition("/")
        if sep and upstream_model and provider in self._providers:
            return [Target(provider=provider, model=upstream_model)]
        raise UnknownModel(
            f"The model '{model}' does not exist or is not served here", param="model"
        )

    def cache_targets(self, model: str) -> list[str]:
        """What the response cache keys a request for `model` by: its configured targets as
        `provider/model`, sorted, whatever their keys' health (a cooling key must not turn
        every request into a miss exactly when upstreams struggle). Raises as `targets`."""
        found = self._cache_targets.get(model)
        if found is None:
            found = sorted({f"{t.provider}/{t.model}" for t in self.targets(model)})
            if len(self._cache_targets) < 4096:  # bounded: provider/model come from clients
                self._cache_targets[model] = found
        return found

    def emulates_tools(self, model: str) -> bool:
        """True for a configured model with `tools: emulate` (its upstream takes no tools)."""
        return model in self._emulated

    def recovery(self, model: str) -> Recovery | None:
        """The model's `recovery` when it is on (a stream broken after content goes on)."""
        return self._recovery.get(model)

    def plan(self, model: str) -> list[Attempt]:
        """Every attempt this request may make, in order, at most `routing.max_attempts`;
        raises NoUpstreamAvailable (with Retry-After) when no key may be tried now.

        A model whose plan has no choice in it (one target, at most one key) always gets the
        same plan while its key is healthy: it is built once and shared (callers only read it)."""
        fixed = self._fixed.get(model)
        if fixed is not None:
            health = fixed[0].health
            if health.clear:
                return fixed
            now = time.monotonic()
            refusal = health.refusal(now, fixed[0].model)
            if refusal[0] > 0:
                raise unavailable(model, [refusal])
            return fixed
        tiers = self._tiers.get(model)
        if tiers is None:
            tiers = _tiers(self.targets(model))
        attempts = self._draw(model, tiers, time.monotonic())
        single = len(tiers) == 1 and len(tiers[0]) == 1
        if single and len(self.slots[tiers[0][0].provider]) == 1 and len(self._fixed) < 4096:
            self._fixed[model] = attempts  # bounded: provider/model come from clients
        return attempts

    def _draw(self, model: str, tiers: list[list[Target]], now: float) -> list[Attempt]:
        attempts: list[Attempt] = []
        waits: list[tuple[float, bool]] = []
        strategy, rng = self._strategy, self._rng
        for tier in tiers:
            candidates: list[tuple[Target, list[KeySlot]]] = []
            for target in tier:
                usable = self._usable(target, now, waits)
                if usable:
                    candidates.append((target, usable))
            if len(candidates) > 1 or (strategy == "weighted" and candidates):
                weights = [t.weight for t, _ in candidates]
                scores = [min(key_score(strategy, s.health) for s in u) for _, u in candidates]
                candidates = strategy_order(strategy, candidates, weights, scores, rng)
            for target, usable in candidates:
                if len(usable) > 1:
                    scores = [key_score(strategy, s.health) for s in usable]
                    weights = [s.weight for s in usable]
                    usable = strategy_order(strategy, usable, weights, scores, rng)
                for slot in usable:
                    attempts.append(self.attempt(target, slot))
                    if len(attempts) >= self._max_attempts:
                        return attempts
        if not attempts:
            raise unavailable(model, waits)
        return attempts

    def attempt(self, target: Target, slot: KeySlot) -> Attempt:
        provider = self._providers[target.provider]
        return Attempt(
            provider=provider,
            adapter=self._adapters[provider.name],
            key=slot.key,
            model=target.model,
            health=slot.health,
            metrics=self.metrics,
            api=target.api,
        )

    def context_window(self, attempt: Attempt) -> int | None:
        """Tokens `attempt`'s upstream model takes: its target's `context_window`, else the
        shipped table's (None: not known)."""
        configured = self._windows.get((attempt.provider.name, attempt.model))
        if configured is not None:
            return configured
        return context_window_of(attempt.model, attempt.provider.kind)

    def wider(self, model: str, failed: Attempt, rest: list[Attempt], made: int) -> list[Attempt]:
        """What a request for `model` tries after `failed` answered a context-length error
        (docs/routing.md, "Context-window fallbacks"): the rest of its plan, then the model's
        targets the plan left out, whose window is known and larger; then the plans of
        `models[].fallbacks.context_window` in order;
        at most `routing.max_attempts` in all with the `made` attempts so far."""
        window = self.context_window(failed) or 0

        def where(a: Attempt) -> tuple[str, str, int]:
            return a.provider.name, a.model, id(a.key)

        taken = {where(failed)}
        larger: list[Attempt] = []

        def offer(attempts: list[Attempt], *, unknown_ok: bool) -> None:
            for a in attempts:
                if where(a) in taken:
                    continue
                if unknown_ok or (self.context_window(a) or 0) > window:
                    taken.add(where(a))
                    larger.append(a)

        # the plan's order first (balanced), then the model's targets the plan's length
        # left out: the skipped same-size attempts free their share of max_attempts
        offer(rest, unknown_ok=False)
        tiers = self._tiers.get(model) or _tiers(self.targets(model))
        now = time.monotonic()
        offer(
            [
                self.attempt(t, slot)
                for tier in tiers
                for t in tier
                for slot in self._usable(t, now, [])
            ],
            unknown_ok=False,
        )
        for name in self._wider_models.get(model, ()):
            try:
                offer(self.plan(name), unknown_ok=True)  # named by the config: larger
            except GatewayError:
                continue  # nothing of that model may be tried now
        return larger[: max(self._max_attempts - made, 0)]

    def _usable(self, target: Target, now: float, waits: list[tuple[float, bool]]) -> list[KeySlot]:
        usable: list[KeySlot] = []
        for slot in self.slots[target.provider]:
            health = slot.health
            if health.clear:
                usable.append(slot)
                continue
            refusal = health.refusal(now, target.model)
            if refusal[0] > 0:
                waits.append(refusal)
            else:
                usable.append(slot)
        return usable

    def model_list(self) -> ModelList:
        """Configured model names, then `provider/model` for every target."""
        cards: dict[str, ModelCard] = {}
        for name, targets in self._models.items():
            cards[name] = ModelCard(id=name, owned_by="gateway")
            for t in targets:
                full = f"{t.provider}/{t.model}"
                cards.setdefault(full, ModelCard(id=full, owned_by=t.provider))
        return ModelList(data=list(cards.values()))


def _tiers(targets: list[Target]) -> list[list[Target]]:
    """Targets grouped by priority, lowest first, in config order within a priority."""
    return [[t for t in targets if t.priority == p] for p in sorted({t.priority for t in targets})]
