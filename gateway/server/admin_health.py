"""GET /admin/health: every model with its targets, every provider with its keys' health.

Master key only, like the rest of the admin API (with no master key configured it answers
403 `admin_disabled`). A key is named by its configured `name` or the first 8 hex digits of
the sha256 of its secret; the secret itself never appears. Times are unix seconds (wall
clock) so they can be compared across replicas; `null` when nothing is pending. The state of
this process is shown, including what it mirrored from the shared store.
"""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from gateway.config import Target
from gateway.routing.health import AUTH_FAILED
from gateway.routing.health import RATE_LIMITED
from gateway.routing.health import KeyHealth
from gateway.routing.router import Router
from gateway.server.auth import authorize_admin
from gateway.server.state import STATE


async def admin_health(request: web.Request) -> web.Response:
    await authorize_admin(request)
    state = request.app[STATE]
    return web.json_response(health_report(state.router, time.monotonic(), time.time()))


def health_report(router: Router, now: float, wall: float) -> dict[str, Any]:
    providers = [
        {"name": provider, "keys": [_key(slot.health, slot.weight, now, wall) for slot in slots]}
        for provider, slots in router.slots.items()
    ]
    models = [
        {"name": name, "targets": [_target(router, t, now, wall) for t in targets]}
        for name, targets in router.models.items()
    ]
    return {"models": models, "providers": providers}


def _target(router: Router, target: Target, now: float, wall: float) -> dict[str, Any]:
    details = [
        _usable(slot.health, target.model, now, wall) for slot in router.slots[target.provider]
    ]
    return {
        "provider": target.provider,
        "model": target.model,
        "priority": target.priority,
        "weight": target.weight,
        "healthy_keys": sum(1 for detail in details if detail["usable"]),
        "keys": len(details),
        "keys_detail": details,
    }


def skip_reasons(health: KeyHealth, model: str, now: float, wall: float) -> list[dict[str, Any]]:
    """Why `health`'s key is not tried for `model` now (empty: it is usable)."""
    why: list[dict[str, Any]] = []
    if health.block is not None:
        if now < health.blocked_until:
            detail = (
                "the upstream refused the key (401/403)"
                if health.block == AUTH_FAILED
                else "too many failures in a row"
            )
            until = _wall(health.blocked_until, now, wall)
            why.append({"reason": health.block, "until": until, "detail": detail})
        elif health.probing:
            detail = "a half-open probe is in flight"
            why.append({"reason": "probing", "until": None, "detail": detail})
    if now < health.shared_until:
        detail = f"held by another process ({health.shared_reason or 'hold'})"
        until = _wall(health.shared_until, now, wall)
        why.append({"reason": "held", "until": until, "detail": detail})
    cooling = max(health.cooling.get(model, 0.0), health.shared_cooling.get(model, 0.0))
    if now < cooling:
        detail = f"429 from the upstream for {model}"
        why.append({"reason": RATE_LIMITED, "until": _wall(cooling, now, wall), "detail": detail})
    for reason, window, limit in (
        ("rpm_exhausted", health.requests, health.rpm),
        ("tpm_exhausted", health.tokens, health.tpm),
    ):
        if limit is not None and window.used(now) >= limit:
            until = _wall(now + window.frees_in(now), now, wall)
            detail = f"{window.used(now)} of {limit} used this minute"
            why.append({"reason": reason, "until": until, "detail": detail})
    return why


def _usable(health: KeyHealth, model: str, now: float, wall: float) -> dict[str, Any]:
    why = skip_reasons(health, model, now, wall)
    return {"key": health.label, "usable": not why, "why": why}


def _wall(until: float, now: float, wall: float) -> float | None:
    return round(wall + (until - now), 3) if until > now else None


def _key(health: KeyHealth, weight: int, now: float, wall: float) -> dict[str, Any]:
    cooling = {**health.shared_cooling, **health.cooling}
    for model, until in health.shared_cooling.items():
        cooling[model] = max(until, cooling[model])
    cooldowns = {m: _wall(until, now, wall) for m, until in cooling.items() if until > now}
    state = health.state(now)
    if state == "healthy" and cooldowns:
        state = "cooldown"  # for the models listed; the key serves others
    return {
        "key": health.label,
        "weight": weight,
        "state": state,
        "unavailable_until": _wall(max(health.blocked_until, health.shared_until), now, wall),
        "cooldowns": cooldowns,
        "consecutive_failures": health.failures,
        "circuit_opens": health.opens,
        "in_flight": health.inflight,
        "ewma_ttft_s": round(health.ewma_ttft, 6) if health.ewma_ttft is not None else None,
        "rpm": {"used": health.requests.used(now), "limit": health.rpm},
        "tpm": {"used": health.tokens.used(now), "limit": health.tpm},
    }
