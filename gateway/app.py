"""Builds the aiohttp Application: routes, middlewares, the upstream pool, startup/shutdown."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web

from gateway.accounting.service import ACCOUNTING
from gateway.accounting.service import Accounting
from gateway.config import Config
from gateway.console.overview import OverviewSampler
from gateway.console.routes import add_console_routes
from gateway.observability.access import access_log_flusher
from gateway.observability.metrics import DURATION_BUCKETS
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.metrics import model_names
from gateway.observability.request_log import REQUEST_LOG
from gateway.observability.request_log import RequestLog
from gateway.observability.request_log import make_sink
from gateway.observability.request_log import request_log_context
from gateway.providers.registry import make_adapter
from gateway.routing.router import Router
from gateway.routing.sync import health_sync
from gateway.server.admin_config import admin_config
from gateway.server.admin_health import admin_health
from gateway.server.admin_keys import add_admin_routes
from gateway.server.admin_requests import add_request_log_routes
from gateway.server.chat import chat_completions
from gateway.server.chat import list_models
from gateway.server.circuit_probe import CircuitProbes
from gateway.server.count_tokens import count_tokens
from gateway.server.embeddings import embeddings
from gateway.server.errors import ERROR_SHAPES
from gateway.server.errors import gateway_middleware
from gateway.server.health import healthz
from gateway.server.health import readyz
from gateway.server.limits import SLOTS
from gateway.server.limits import StreamSlots
from gateway.server.messages import messages
from gateway.server.messages import render_error
from gateway.server.metrics_route import metrics
from gateway.server.observers import OBSERVERS
from gateway.server.observers import Observers
from gateway.server.responses import create_response
from gateway.server.state import STATE
from gateway.server.state import ConfigSource
from gateway.server.state import GatewayState
from gateway.store.ledger import make_ledger

log = logging.getLogger("gateway")


def build_app(
    config: Config, metrics_dir: Path | None = None, *, source: ConfigSource | None = None
) -> web.Application:
    """`metrics_dir`: where the workers of a multi-process gateway keep their metric values
    (gateway/server/runner.py); None: in this process's memory. `source`: the file `config`
    was read from (its sha256 and load time, shown by GET /admin/config).

    A reload (gateway/server/reload.py) replaces what is built from the config (the router
    in `STATE`, the accounting's keys and prices) and keeps the rest: the Application, its
    routes and middlewares, the concurrency slots, the store, the upstream pool, the
    metrics."""
    adapters = {p.name: make_adapter(p) for p in config.providers}
    gateway_metrics = GatewayMetrics(models=model_names(config), directory=metrics_dir)
    router = Router(config, adapters, metrics=gateway_metrics)
    state = GatewayState(config, router, source or ConfigSource(None, None, time.time()))
    observers = _observers(config, gateway_metrics)
    app = web.Application(
        middlewares=[gateway_middleware(gateway_metrics, observers)],
        client_max_size=config.server.max_body_bytes,
        handler_args={"access_log": None},
    )
    app[STATE] = state
    # the workers share the container's memory: each takes its share of what it holds
    app[SLOTS] = StreamSlots(config.server.limits, workers=config.server.workers)
    app[ACCOUNTING] = Accounting(config, make_ledger(config.store.url))
    cache = state.cache
    if cache is not None and cache.semantic is not None:  # numpy only with semantic mode
        from gateway.server.cache_embedder import CacheEmbedder

        model = cache.semantic.embedding_model
        cache.semantic.embedder = CacheEmbedder(state, app[ACCOUNTING], model)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_post("/v1/messages", messages)
    app.router.add_post("/v1/messages/count_tokens", count_tokens)
    app[ERROR_SHAPES] = {"/v1/messages": render_error}
    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_get("/v1/models", list_models)
    app.router.add_post("/v1/responses", create_response)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/admin/health", admin_health)
    app.router.add_get("/admin/config", admin_config)
    add_admin_routes(app)
    app.cleanup_ctx.append(_health_sync)
    app.cleanup_ctx.append(_circuit_probes)
    app.cleanup_ctx.append(access_log_flusher)
    if observers is not None:
        app[OBSERVERS] = observers
        if observers.request_log is not None:
            app[REQUEST_LOG] = observers.request_log
            app.cleanup_ctx.append(request_log_context)
        if observers.tracing is not None:
            app.on_cleanup.append(_stop_tracing)
    add_request_log_routes(app)
    if config.console.enabled:
        sampler = OverviewSampler(
            gateway_metrics.registry, DURATION_BUCKETS, config.console.overview_interval_s
        )
        add_console_routes(app, sampler)
    app.on_cleanup.append(_close_pool)
    if not config.auth.master_key:
        log.warning("auth.master_key is empty: the gateway is open to anyone who can reach it")
    return app


def _observers(config: Config, metrics: GatewayMetrics) -> Observers | None:
    """The request log and the tracer, when configured (None: neither)."""
    request_log = tracing = None
    if config.request_log is not None:
        sink = make_sink(config.request_log, config.store.url)
        request_log = RequestLog(config.request_log, sink, metrics)
    if config.tracing is not None:
        from gateway.observability.tracing import Tracing

        tracing = Tracing.from_config(config.tracing, os.environ)
    if request_log is None and tracing is None:
        return None
    return Observers(config, request_log, tracing)


async def _stop_tracing(app: web.Application) -> None:
    tracing = app[OBSERVERS].tracing
    if tracing is not None:  # what is queued is exported, within the grace period
        await tracing.shutdown(app[STATE].config.server.shutdown_grace_s)


def _health_sync(app: web.Application) -> AsyncIterator[None]:
    # made at startup, with the router in force then (a worker may reload before it serves)
    state = app[STATE]
    return health_sync(state.router, state.kv, state.config.store.url)(app)


async def _circuit_probes(app: web.Application) -> AsyncIterator[None]:
    state = app[STATE]
    probes = CircuitProbes(state)
    events = state.router.events  # one for the process: carried over by every reload
    events.prober = probes
    try:
        yield
    finally:
        events.prober = None
        await probes.stop()


async def _close_pool(app: web.Application) -> None:
    state = app[STATE]
    state.pool.close()
    if state.cache is not None:
        await state.cache.close()
    await state.kv.close()
    await app[ACCOUNTING].hits.flush()
    await app[ACCOUNTING].ledger.close()
