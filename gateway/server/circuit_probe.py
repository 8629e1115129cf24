"""Circuits that come back on time (docs/routing.md, "Circuit probes").

When a key's circuit opens, a timer is set for the end of its open period. When it fires,
the gateway itself sends that key the half-open probe: the smallest chat request its
adapter can build (one user word, `max_tokens: 1`) for an upstream model a configured chat
target uses on the key's provider. Before, only the next real request could be the probe:
a client's request paid for a still-failing upstream, and a recovered one stayed out of
rotation until traffic came by.

- a success status closes the circuit (the answer is not read further);
- a 5xx, a timeout or a connection failure opens it again (its period doubles, capped by
  `routing.circuit_max_open_s`), which sets the next timer;
- a 429 or 401/403 are told to key health as on any attempt;
- any other 4xx proves nothing either way: the key stays half-open for a real request.

At most one timer per key and one probe at a time (key health's own half-open rule: a real
request is refused while the probe is in flight). A probe is no client's request: it is
not charged to any key, logged in the request log or counted in the request metrics; its
failures count in `gateway_upstream_errors_total` like every attempt's. Each worker probes
its own circuits. `routing.circuit_probe: false` leaves the probe to real requests.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import TYPE_CHECKING
from typing import Any

import msgspec

from gateway.errors import UpstreamError
from gateway.errors import UpstreamTimeout
from gateway.providers.base import UpstreamCall
from gateway.providers.base import hide_credentials
from gateway.routing.health import CIRCUIT_OPEN
from gateway.routing.health import PROBE
from gateway.routing.health import KeyHealth
from gateway.routing.router import Attempt
from gateway.routing.router import Router
from gateway.upstream.outcome import report_failure
from gateway.upstream.transport import open_upstream
from gateway.wire.openai_chat import ChatRequest

if TYPE_CHECKING:
    from gateway.server.state import GatewayState

log = logging.getLogger("gateway.routing")

PROBE_BODY: dict[str, Any] = {
    "model": "",
    "messages": [{"role": "user", "content": "ping"}],
    "max_tokens": 1,
    "stream": False,
}
MAX_PROBE_S = 30.0  # a probe waits at most this long (and at most the provider's total_s)


def probe_attempt(router: Router, health: KeyHealth) -> Attempt | None:
    """The attempt a probe of `health` makes: its provider and key, the upstream model of
    the first configured chat target on that provider (None: no chat target uses it)."""
    for slot in router.slots.get(health.provider, ()):
        if slot.health is not health:
            continue
        for targets in router.models.values():
            for target in targets:
                if target.provider == health.provider and target.api == "chat":
                    return router.attempt(target, slot)
    return None


class CircuitProbes:
    """The probe timers of one process; `opened` is told of every circuit that opens."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state  # its router and config are replaced by a reload; key health stays
        self.timers: dict[KeyHealth, asyncio.TimerHandle] = {}
        self.probes: set[asyncio.Task[None]] = set()
        self.stopped = False

    def opened(self, health: KeyHealth, until: float) -> None:
        """`health`'s circuit is open until `until` (monotonic): probe it then."""
        if self.stopped or not self.state.config.routing.circuit_probe:
            return
        loop = asyncio.get_running_loop()
        timer = self.timers.pop(health, None)
        if timer is not None:
            timer.cancel()
        delay = max(until - time.monotonic(), 0.0) + 0.01  # just past the end: half-open
        self.timers[health] = loop.call_later(delay, self._fire, health)

    def _fire(self, health: KeyHealth) -> None:
        self.timers.pop(health, None)
        if self.stopped or health.block != CIRCUIT_OPEN or health.probing:
            return
        task = asyncio.get_running_loop().create_task(self.probe(health))
        self.probes.add(task)
        task.add_done_callback(self.probes.discard)

    async def probe(self, health: KeyHealth) -> None:
        attempt = probe_attempt(self.state.router, health)
        if attempt is None:
            return  # nothing to ask it: a real request is the probe
        ticket = health.begin(time.monotonic(), attempt.model)
        if ticket != PROBE:  # closed or held again meanwhile, or a real request probes it
            if ticket:
                health.released(ticket)
            return
        try:
            await self._send(attempt)
        except UpstreamError as err:
            self._failed(attempt, ticket, err)
            return
        except BaseException:
            health.released(ticket)
            raise
        health.succeeded(ticket, None, 0, time.monotonic())
        log.info("provider %r key %s: circuit closed by its probe", health.provider, health.label)

    def _failed(self, attempt: Attempt, ticket: int, err: UpstreamError) -> None:
        health = attempt.health
        status = err.upstream_status
        if status is not None and 400 <= status < 500 and status not in (401, 403, 429):
            health.released(ticket)  # refused the probe itself: says nothing of the key
            return
        report_failure(attempt, ticket, err)

    async def _send(self, attempt: Attempt) -> None:
        adapter, provider = attempt.adapter, attempt.provider
        stream = not adapter.native_unary  # a streaming-only upstream: its head is enough
        body = {**PROBE_BODY, "model": attempt.model, "stream": stream}
        source = adapter.token_source(attempt.key)
        credential = await self.state.tokens.credential(source) if source is not None else None
        call = UpstreamCall(
            request=msgspec.convert(body, ChatRequest),
            body=body,
            provider=provider,
            key=attempt.key,
            model=attempt.model,
            stream=stream,
            request_id="circuit-probe",
            created=int(time.time()),
            now=time.time(),
            credential=credential,
            api=attempt.api,
        )
        request = adapter.build_request(call)
        request.egress = provider.egress
        bound = min(provider.timeouts.total_s, MAX_PROBE_S)
        try:
            async with asyncio.timeout(bound):
                answer = await open_upstream(
                    self.state.pool, adapter, request, connect_s=provider.timeouts.connect_s
                )
        except TimeoutError:
            raise UpstreamTimeout(f"the circuit probe had no answer within {bound:g}s") from None
        except UpstreamError as err:  # the key's secrets and the fetched credential cut out
            raise hide_credentials(err, attempt.key, credential) from None
        answer.abort()

    def __call__(self, health: KeyHealth, reason: str, until: float) -> None:
        if reason == CIRCUIT_OPEN:
            self.opened(health, until)

    async def stop(self) -> None:
        self.stopped = True
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()
        for task in list(self.probes):
            task.cancel()
        if self.probes:
            await asyncio.wait(set(self.probes), timeout=1.0)
