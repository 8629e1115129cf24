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
        {
            "name": name,
            "targets": [
                {
                    "provider": t.provider,
                    "model": t.model,
                    "priority": t.priority,
                    "weight": t.weight,
                    "healthy_keys": sum(
                        1
                        for slot in router.slots[t.provider]
                        if slot.health.wait_s(now, t.model) == 0
                    ),
                    "keys": len(router.slots[t.provider]),
                }
                for t in targets
            ],
        }
        for name, targets in router.models.items()
    ]
    return {"models": models, "providers": providers}


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
