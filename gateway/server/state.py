"""What the Application shares with its handlers, under typed AppKeys."""

from __future__ import annotations

import asyncio
import itertools
import secrets
from typing import Protocol

from aiohttp import web

from gateway.config import Config
from gateway.routing.router import Attempt
from gateway.routing.router import Router
from gateway.store.kv import KeyValueStore
from gateway.store.kv import make_kv
from gateway.upstream.attempts import AttemptRunner
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.http_client import HttpPool


class InFlight(Protocol):
    """A request being served, which a graceful shutdown may have to end early."""

    def shut_down(self, reason: str) -> None: ...


class GatewayState:
    """The running gateway: its config, router, upstream pool and the requests in flight."""

    def __init__(self, config: Config, router: Router) -> None:
        self.config = config
        self.router = router
        self.pool = HttpPool()
        self.tokens = AccessTokens()
        self.kv: KeyValueStore = make_kv(config.store.url)
        self.active: set[InFlight] = set()
        self.idle = asyncio.Event()  # set whenever no request is in flight
        self.idle.set()
        self.draining = False
        # Request ids: a random per-process prefix and a counter, unique across processes
        # and replicas without a syscall per request.
        self._id_prefix = secrets.token_hex(6)
        self._ids = itertools.count(1)

    def attempt_runner(
        self, plan: list[Attempt], model: str, *, refusals: bool = False
    ) -> AttemptRunner:
        """The runner of one request's attempts, its deadline `routing.deadline_s` from now."""
        return AttemptRunner(
            plan=plan,
            model=model,
            deadline_s=self.config.routing.deadline_s,
            pool=self.pool,
            tokens=self.tokens,
            refusals=refusals,
        )

    def new_request_id(self) -> str:
        return f"{self._id_prefix}{next(self._ids):010x}"

    def enter(self, actor: InFlight) -> None:
        self.active.add(actor)
        self.idle.clear()

    def leave(self, actor: InFlight) -> None:
        self.active.discard(actor)
        if not self.active:
            self.idle.set()


STATE = web.AppKey("gateway_state", GatewayState)
REQUEST_ID = web.RequestKey("request_id", str)
