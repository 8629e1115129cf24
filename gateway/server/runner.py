"""Running the server: one process on uvloop, or N worker processes sharing the port.

Graceful shutdown on SIGTERM/SIGINT: readiness turns 503 and the listening socket closes,
requests in flight get `server.shutdown_grace_s` to finish, then the rest are ended (a
committed stream with an error event, anything else with a 503), and the process exits 0.
With `--workers N` a parent process starts N workers, each binding the port with
SO_REUSEPORT so the kernel spreads connections; the parent forwards signals, restarts a
worker that dies on its own, and exits once every worker has drained.

Reload (gateway/server/reload.py): SIGHUP, or a change of the config file, reloads the
config in each worker; the supervisor passes SIGHUP on to every worker, and a worker it
starts later begins with the newest valid file. SIGHUP is blocked from the start of `serve`
until a worker's handler is in place (workers inherit the mask), so a SIGHUP that arrives
while a process starts is held, not fatal (its default action), and delivered once it can
be acted on.

Metrics with N workers: the parent makes a fresh directory before starting any worker; each
worker keeps its metric values in a file there, and `/metrics` on any worker merges them all
(gateway/observability/segments.py). When a worker dies the parent marks its file dead (its
counters still count, its gauges no longer do); the directory is removed when the parent
exits. Logging is set up from `config.logging` in the parent and in every worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from aiohttp import web

from gateway.app import build_app
from gateway.config import Config
from gateway.observability.logs import configure_logging
from gateway.observability.segments import retire
from gateway.server.collector import tune_collector
from gateway.server.connection import GatewayRunner
from gateway.server.connection import handler_args
from gateway.server.limits import SLOTS
from gateway.server.limits import raise_descriptor_limit
from gateway.server.reload import ConfigFile
from gateway.server.reload import Loaded
from gateway.server.reload import Reloader
from gateway.server.reload import Signature
from gateway.server.reload import install_sighup
from gateway.server.reload import read_config
from gateway.server.reload import restart_only_changes
from gateway.server.reload import signature
from gateway.server.reload import with_overrides
from gateway.server.state import STATE
from gateway.server.state import ConfigSource

log = logging.getLogger("gateway.server")
LAST_REQUESTS_GRACE_S = 5.0
# Connections the kernel completes before the gateway accepts them. aiohttp's SockSite
# listens again with its own default (128), so it is passed there too: at 128 a burst of a
# few thousand connections overflows the queue and the clients' SYNs are retried 1, 3, 7 s
# later (2,000 streams opened in 14-21 s instead of 1 s).
LISTEN_BACKLOG = 4096


def bind_socket(host: str, port: int, *, reuse_port: bool) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if reuse_port:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.setblocking(False)
    return sock


def _loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency on every supported OS
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class Start(NamedTuple):
    """What a worker starts serving: the config, where it came from, and the file's
    signature when it was read (None for both without a file)."""

    config: Config
    source: ConfigSource
    file: ConfigFile | None = None
    seen: Signature | None = None


def run_worker(config: Config | Start, sock: socket.socket, metrics_dir: Path | None = None) -> int:
    """Serve on `sock` until SIGTERM/SIGINT, then drain; the process's exit code."""
    start = config if isinstance(config, Start) else Start(config, _no_file())
    with asyncio.Runner(loop_factory=_loop_factory()) as runner:
        runner.run(_serve(start, sock, metrics_dir))
    return 0


def _no_file() -> ConfigSource:
    return ConfigSource(None, None, time.time())


async def start_site(
    app: web.Application, config: Config, sock: socket.socket
) -> tuple[web.AppRunner, web.SockSite]:
    """Serve `app` on the listening `sock`, with the header limits of `server.limits`, the
    deadlines of a request's head and body, and unparsable requests answered in the OpenAI
    error shape."""
    head_timeouts = app[STATE].router.metrics.rejection_for("client_header_timeout")
    runner = GatewayRunner(
        app,
        handler_cancellation=True,
        access_log=None,
        shutdown_timeout=LAST_REQUESTS_GRACE_S,
        **handler_args(config.server, on_head_timeout=head_timeouts.inc),
    )
    await runner.setup()
    site = web.SockSite(runner, sock, backlog=LISTEN_BACKLOG)
    await site.start()
    return runner, site


async def _serve(start: Start, sock: socket.socket, metrics_dir: Path | None) -> None:
    config = start.config
    sock.listen(LISTEN_BACKLOG)
    app = build_app(config, metrics_dir, source=start.source)
    reloader = Reloader(app, start.file, start.seen)
    await reloader.catch_up()  # a worker started after the file changed serves the new one
    runner, site = await start_site(app, config, sock)
    tune_collector()
    host, port = sock.getsockname()[:2]
    log.info(
        "listening on http://%s:%s, up to %d concurrent requests",
        host if ":" not in host else f"[{host}]",
        port,
        app[SLOTS].limit,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    remove_sighup = install_sighup(reloader)
    reloader.start()
    try:
        await stop.wait()
        remove_sighup()
        await reloader.stop()
        await _drain(app, site, app[STATE].config.server.shutdown_grace_s)
    finally:
        await runner.cleanup()


async def _drain(app: web.Application, site: web.BaseSite, grace_s: float) -> None:
    state = app[STATE]
    state.draining = True
    await site.stop()
    log.info("draining: %d requests in flight, grace %gs", len(state.active), grace_s)
    try:
        await asyncio.wait_for(state.idle.wait(), grace_s)
    except TimeoutError:
        log.warning("grace period over: ending %d requests", len(state.active))
        for actor in list(state.active):
            actor.shut_down("the gateway is shutting down")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(state.idle.wait(), LAST_REQUESTS_GRACE_S)
    log.info("drained")


def _worker_main(start: Start, host: str, port: int, metrics_dir: Path) -> None:
    configure_logging(start.config)
    sys.exit(run_worker(start, bind_socket(host, port, reuse_port=True), metrics_dir))


# what the command line logs before the config is read (then `config.logging` applies)
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s"


def serve(
    config: Config, *, host: str, port: int, workers: int, config_file: ConfigFile | None = None
) -> int:
    """Serve `config` (read again from `config_file` when given, so that what is served,
    its sha256 and the file's signature are of one read) on host:port with `workers`."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})  # see the module docstring
    if config_file is not None:
        first = read_config(config_file)
        if not isinstance(first, Loaded):  # changed for the worse since it was checked
            for problem in first.problems:
                print(problem, file=sys.stderr)
            return 2
        start = Start(first.config, first.source, config_file, first.signature)
    else:
        overrides = ConfigFile("", host=host, port=port, workers=workers)
        start = Start(with_overrides(config, overrides), _no_file())
    config = start.config
    configure_logging(config)
    host, port, workers = config.server.host, config.server.port, config.server.workers
    raise_descriptor_limit()  # before the workers start: they inherit it
    if workers <= 1:
        return run_worker(start, bind_socket(host, port, reuse_port=False))
    # The parent holds the port (bound, never listening) so that port 0 resolves once.
    holder = bind_socket(host, port, reuse_port=True)
    port = holder.getsockname()[1]
    metrics_dir = Path(tempfile.mkdtemp(prefix="gateway-metrics-"))
    try:
        return _supervise(start, host, port, workers, holder, metrics_dir)
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def _newest(start: Start) -> Start:
    """What a worker started now should serve: the file as it is now when it changed and is
    valid (the running workers reloaded it), else what the last one started with."""
    file = start.file
    if file is None or signature(file.path) == start.seen:
        return start
    now = read_config(file)
    if not isinstance(now, Loaded) or restart_only_changes(start.config, now.config):
        return start  # the worker's own catch-up reports (and refuses) it
    return Start(now.config, now.source, file, now.signature)


def _supervise(
    first: Start, host: str, port: int, workers: int, holder: socket.socket, metrics_dir: Path
) -> int:
    ctx = multiprocessing.get_context("spawn")
    stopping = False
    newest = first

    def start() -> multiprocessing.process.BaseProcess:
        nonlocal newest
        newest = _newest(newest)
        proc = ctx.Process(
            target=_worker_main, args=(newest, host, port, metrics_dir), daemon=False
        )
        # SIGHUP blocked while forking: the worker inherits the mask and unblocks it once
        # its handler is in place (a SIGHUP meant for the parent waits until after)
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})
        return proc

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stopping
        stopping = True
        forward(signal.SIGTERM)

    def forward(signum: int) -> None:
        for proc in procs:
            if proc.pid is not None and proc.is_alive():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signum)

    def on_sighup(signum: int, frame: object) -> None:
        if not stopping:
            log.info("SIGHUP: passed on to %d workers", len(procs))
            forward(signal.SIGHUP)

    procs: list[multiprocessing.process.BaseProcess] = []
    signal.signal(signal.SIGHUP, on_sighup)
    procs.extend(start() for _ in range(workers))
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    log.info("supervising %d workers on %s:%d", workers, host, port)
    deadline: float | None = None
    failed = 0
    while procs:
        multiprocessing.connection.wait([p.sentinel for p in procs], timeout=1.0)
        for proc in list(procs):
            if proc.is_alive():
                continue
            procs.remove(proc)
            if proc.pid is not None:
                retire(metrics_dir, proc.pid)
            if not stopping:
                log.error("worker %s exited with %s; starting another", proc.pid, proc.exitcode)
                time.sleep(0.5)
                procs.append(start())
            elif proc.exitcode not in (0, -signal.SIGTERM):
                # -SIGTERM: the worker was still starting when asked to stop; nothing to drain
                failed += 1
                log.error("worker %s exited with %s while stopping", proc.pid, proc.exitcode)
        if stopping and deadline is None:
            deadline = time.monotonic() + newest.config.server.shutdown_grace_s + 15
        if deadline is not None and time.monotonic() > deadline:
            for proc in procs:
                proc.kill()
    holder.close()
    return 1 if failed else 0
