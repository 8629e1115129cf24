"""What the Application shares with its handlers, under typed AppKeys.

The config a worker serves and everything made from it (the router with its plans, key
health and adapters) are one immutable `Served` value; `GatewayState.served` is the one
reference a reload (gateway/server/reload.py) replaces. A handler reads `state.config` /
`state.router` when a request starts and keeps what it planned with (its attempts, its
actor's settings), so a request in flight finishes on the config it started with while the
next one sees the new config. The upstream pool, tokens, store and in-flight set belong to
the process and outlive every reload.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from functools import partial
from typing import Literal
from typing import NamedTuple
from typing import Protocol

from aiohttp import web

from gateway.cache.build import build_cache
from gateway.cache.service import ResponseCache
from gateway.config import Config
from gateway.observability.request_entry import AttemptEntry
from gateway.routing.router import Attempt
from gateway.routing.router import Router
from gateway.store.kv import KeyValueStore
from gateway.store.kv import make_kv
from gateway.upstream.attempts import AttemptRunner
from gateway.upstream.attempts import AttemptTracer
from gateway.upstream.credentials import AccessTokens
from gateway.upstream.http_client import HttpPool
from gateway.upstream.retries import RetryPolicy


class InFlight(Protocol):
    """A request being served, which a graceful shutdown may have to end early."""

    def shut_down(self, reason: str) -> None: ...


class ConfigSource(NamedTuple):
    """Where the config in force came from: its file (None: the built-in default), the
    sha256 of the file's bytes, and when it was loaded (unix seconds)."""

    path: str | None
    sha256: str | None
    loaded_at: float


class ReloadReport(NamedTuple):
    """The last reload's outcome: when, ok or error, and every problem (none when ok)."""

    at: float
    result: Literal["ok", "error"]
    trigger: str  # "SIGHUP", "file" (the watcher saw it change) or "start"
    problems: tuple[str, ...]
    sha256: str | None  # of the file that was tried (None: it could not be read)


class Served(NamedTuple):
    """The config in force and what was built from it: replaced whole by a reload."""

    config: Config
    router: Router
    source: ConfigSource


class GatewayState:
    """The running gateway: what it serves (`served`), its upstream pool and the requests
    in flight."""

    def __init__(self, config: Config, router: Router, source: ConfigSource | None = None) -> None:
        self.served = Served(config, router, source or ConfigSource(None, None, 0.0))
        self.last_reload: ReloadReport | None = None
        self.pool = HttpPool()
        self.tokens = AccessTokens()
        self.kv: KeyValueStore = make_kv(config.store.url)
        # None when no model caches: the request path's one check (gateway/cache/)
        self.cache: ResponseCache | None = build_cache(config, self.kv)
        self.active: set[InFlight] = set()
        self.idle = asyncio.Event()  # set whenever no request is in flight
        self.idle.set()
        self.draining = False
        # Request ids: a random per-process prefix and a counter, unique across processes
        # and replicas without a syscall per request.
        self._id_prefix = secrets.token_hex(6)
        self._ids = itertools.count(1)

    @property
    def config(self) -> Config:
        return self.served.config

    @property
    def router(self) -> Router:
        return self.served.router

    def attempt_runner(
        self,
        plan: list[Attempt],
        model: str,
        *,
        refusals: bool = False,
        journal: list[AttemptEntry] | None = None,
        tracer: AttemptTracer | None = None,
    ) -> AttemptRunner:
        """The runner of one request's attempts, its deadline `routing.deadline_s` from now."""
        return AttemptRunner(
            plan=plan,
            model=model,
            deadline_s=self.config.routing.deadline_s,
            pool=self.pool,
            tokens=self.tokens,
            refusals=refusals,
            journal=journal,
            tracer=tracer,
            retries=RetryPolicy.of(self.config.routing),
            wider=partial(self.router.wider, model),
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
