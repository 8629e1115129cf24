"""Reloading the config without a restart: SIGHUP, or the config file changing.

Each worker process reloads for itself (with `--workers N` the supervisor passes SIGHUP on
to every worker, and every worker watches the file), in three steps:

1. read: the file's bytes once (their sha256 is what `/admin/config` shows), parsed and
   checked by the same code as at start (`parse_config`, then what this build cannot serve),
   with the command line's `--host/--port/--workers` applied as at start. Off the event loop.
2. check: a setting that only a restart can change (`RESTART_ONLY`: the listener, workers,
   the store, the connection-level limits, ...) refuses the whole reload, naming each field;
   so the config in force is always exactly one file's.
3. apply: a new router (plans, adapters, prices) that takes over the key health of every
   key that still exists (routing/router.py), the accounting's keys and prices, the metric
   labels, the log redaction; then `state.served` is replaced, one assignment on the event
   loop. A request that already started keeps what it planned with.

An invalid file changes nothing. Either way one log line (`config reload: {...}`, JSON,
every problem; problems never quote a value) and `gateway_config_reloads_total{result}`.

The file is watched by polling `os.stat` of its path every WATCH_INTERVAL_S: following the
symlinks each time, so Kubernetes' ConfigMap swap (`config.yaml -> ..data/config.yaml`,
`..data` re-pointed atomically) shows as a new inode like any rename or rewrite. A change is
read once the file has stopped changing for SETTLE_S, and a file that is empty (a writer
that truncated it and has not written yet) is refused rather than served as an empty config.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from typing import NamedTuple

import msgspec
from aiohttp import web

from gateway.accounting.service import ACCOUNTING
from gateway.config import Config
from gateway.config import ConfigError
from gateway.config import parse_config
from gateway.observability.logs import configure_logging
from gateway.observability.logs import flush_access_log
from gateway.observability.metrics import model_names
from gateway.providers.registry import make_adapter
from gateway.providers.registry import supported_kinds
from gateway.routing.router import Router
from gateway.routing.sync import HealthSync
from gateway.server.observers import OBSERVERS
from gateway.server.state import STATE
from gateway.server.state import ConfigSource
from gateway.server.state import ReloadReport
from gateway.server.state import Served

log = logging.getLogger("gateway.reload")
WATCH_INTERVAL_S = 0.5
SETTLE_S = 0.1  # a change is read once the file has looked the same for this long
SETTLE_ROUNDS = 20  # ... at most this many times (a file rewritten without pause: read anyway)

# What a running process cannot change: where it listens and how many processes it runs,
# its store (every budget, window and virtual key lives there), and what its connections
# were set up with. Dotted paths under the config; each is compared after the command line's
# overrides are applied, so a field the command line sets is never a change.
RESTART_ONLY = (
    "server.host",
    "server.port",
    "server.workers",
    "server.max_body_bytes",
    "server.client_header_timeout_s",
    "server.client_body_timeout_s",
    "server.limits.max_header_bytes",
    "server.limits.max_concurrent_streams",
    "server.limits.max_concurrent_streams_per_key",
    "store.url",
    "request_log",  # the log's writer and its sink are set up with the process
    "tracing",  # so is the tracer and its exporter
    "cache",  # the response cache and its store (and each model's `cache`, below)
    "console",  # the console's routes and its overview sampler
)

Signature = tuple[int, int, int, int]  # st_dev, st_ino, st_mtime_ns, st_size


class ConfigFile(NamedTuple):
    """The config file a process serves, and the command line's overrides of it (None: the
    file's value)."""

    path: str
    host: str | None = None
    port: int | None = None
    workers: int | None = None


class Loaded(NamedTuple):
    """A config read from its file: valid and checked, with where it came from."""

    config: Config
    source: ConfigSource
    signature: Signature | None


class Refused(NamedTuple):
    """A config file that cannot be served: every problem, the sha256 of what was read."""

    problems: list[str]
    sha256: str | None
    signature: Signature | None = None


def signature(path: str) -> Signature | None:
    """What identifies the file's content now (None: it cannot be stat'ed): the target's
    device, inode, mtime and size, symlinks followed."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)


def unsupported(config: Config) -> list[str]:
    """Problems for what the schema allows but this build does not do yet (as `gateway
    serve` refuses at start)."""
    kinds = supported_kinds()
    return [
        f"providers[{i}].kind: kind {p.kind!r} is not available in this build yet"
        for i, p in enumerate(config.providers)
        if p.kind not in kinds
    ]


def with_overrides(config: Config, file: ConfigFile) -> Config:
    """`config` with the command line's listen address and workers, as `gateway serve` runs it."""
    server = config.server
    effective = msgspec.structs.replace(
        server,
        host=file.host or server.host,
        port=server.port if file.port is None else file.port,
        workers=file.workers or server.workers,
    )
    return msgspec.structs.replace(config, server=effective)


def read_config(file: ConfigFile) -> Loaded | Refused:
    """The file's config, validated whole, or every problem with it (blocking: file IO)."""
    path = file.path
    # the signature from before the read: a change during it is seen (and read) again
    before = signature(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        return Refused([f"{path}: cannot read: {exc.strerror or exc}"], None, before)
    digest = hashlib.sha256(data).hexdigest()
    if not data.strip():
        return Refused([f"{path}: the file is empty (a write in progress?)"], digest, before)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return Refused([f"{path}: not UTF-8 text"], digest, before)
    try:
        config = parse_config(text, os.environ, path)
    except ConfigError as exc:
        return Refused(list(exc.problems), digest, before)
    problems = unsupported(config)
    if problems:
        return Refused(problems, digest, before)
    source = ConfigSource(path, digest, time.time())
    return Loaded(with_overrides(config, file), source, before)


def _field(config: Config, dotted: str) -> Any:
    value: Any = config
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def restart_only_changes(old: Config, new: Config) -> list[str]:
    # never the values: store.url may carry a password
    changed = [dotted for dotted in RESTART_ONLY if _field(old, dotted) != _field(new, dotted)]
    if _model_caches(old) != _model_caches(new):
        changed.append("models[].cache")
    return [f"{dotted}: changes only with a restart; nothing was applied" for dotted in changed]


def _model_caches(config: Config) -> dict[str, object]:
    """Each model's own cache settings: the response cache is built with the process."""
    return {m.name: m.cache for m in config.models if m.cache is not None}


def apply(app: web.Application, config: Config, source: ConfigSource) -> None:
    """Serve `config` in this process from the next request on (see the module docstring)."""
    state = app[STATE]
    old = state.router
    adapters = {p.name: make_adapter(p) for p in config.providers}
    # From here on nothing can fail: every step only assigns what was built.
    router = Router(config, adapters, previous=old)
    publisher = router.events.publisher
    if isinstance(publisher, HealthSync):
        publisher.follow(router)
    router.metrics.serve_models(model_names(config))
    app[ACCOUNTING].reconfigure(config)
    state.served = Served(config, router, source)
    flush_access_log()  # the access handler is replaced: its waiting lines go first
    configure_logging(config)  # the new level and format, and the new secrets redacted
    observers = app.get(OBSERVERS)
    if observers is not None:
        observers.reconfigure(config)  # the new secrets cut from request-log records


def report_line(report: ReloadReport, path: str | None) -> str:
    """The one log line of a reload (JSON after the prefix, so it is parsed as one record)."""
    fields = {
        "result": report.result,
        "trigger": report.trigger,
        "path": path,
        "sha256": report.sha256,
        "problems": list(report.problems),
    }
    return "config reload: " + json.dumps(fields, separators=(",", ":"))


class Reloader:
    """Reloads one worker's app on request (SIGHUP) and when its file changes."""

    def __init__(
        self, app: web.Application, file: ConfigFile | None, seen: Signature | None
    ) -> None:
        self._app = app
        self._file = file
        self._seen = seen  # the file's signature when it was last read (or tried)
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._pending: set[asyncio.Task[ReloadReport]] = set()

    def request(self, trigger: str) -> None:
        """Reload soon (from a signal handler: nothing here may block)."""
        task = asyncio.get_running_loop().create_task(self.reload(trigger))
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def reload(self, trigger: str) -> ReloadReport:
        async with self._lock:  # one at a time: the second one reads the newer file
            loop = asyncio.get_running_loop()
            if self._file is None:
                outcome: Loaded | Refused = Refused(
                    ["no config file: the built-in default is served (start with --config)"],
                    None,
                    self._seen,
                )
            else:
                outcome = await loop.run_in_executor(None, read_config, self._file)
            return self._conclude(trigger, outcome)

    def _conclude(self, trigger: str, outcome: Loaded | Refused) -> ReloadReport:
        state = self._app[STATE]
        self._seen = outcome.signature
        if isinstance(outcome, Refused):
            return self._record(trigger, "error", outcome.problems, outcome.sha256)
        sha256 = outcome.source.sha256
        problems = restart_only_changes(state.config, outcome.config)
        if problems:
            return self._record(trigger, "error", problems, sha256)
        try:
            apply(self._app, outcome.config, outcome.source)
        except Exception as exc:  # a bug, not the file: nothing was assigned yet
            log.exception("config reload: applying the new config failed")
            return self._record(trigger, "error", [f"not applied: {type(exc).__name__}"], sha256)
        return self._record(trigger, "ok", [], sha256)

    def _record(
        self, trigger: str, result: str, problems: list[str], sha256: str | None
    ) -> ReloadReport:
        state = self._app[STATE]
        report = ReloadReport(
            at=time.time(),
            result="ok" if result == "ok" else "error",
            trigger=trigger,
            problems=tuple(problems),
            sha256=sha256,
        )
        state.last_reload = report
        state.router.metrics.config_reload_for(report.result).inc()
        line = report_line(report, self._file.path if self._file else None)
        if report.result == "ok":
            log.info("%s", line)
        else:
            log.error("%s", line)
        return report

    # --- watching the file -------------------------------------------------------------------

    async def catch_up(self) -> None:
        """Reload now if the file changed since the config this process started with was
        read (a worker started after a change), before serving anything."""
        if self._file is not None and signature(self._file.path) != self._seen:
            await self.reload("start")

    def start(self) -> None:
        if self._file is not None:
            self._task = asyncio.get_running_loop().create_task(self._watch(), name="reload")

    async def stop(self) -> None:
        for task in [*self._pending, *([self._task] if self._task else [])]:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _watch(self) -> None:
        assert self._file is not None
        path = self._file.path
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(WATCH_INTERVAL_S)
            now = await loop.run_in_executor(None, signature, path)
            if now == self._seen:
                continue
            for _ in range(SETTLE_ROUNDS):
                await asyncio.sleep(SETTLE_S)
                settled = await loop.run_in_executor(None, signature, path)
                if settled == now:
                    break
                now = settled
            if now is None:
                # gone (a rename in progress, an unmounted volume): keep serving, look again
                continue
            try:
                await self.reload("file")
            except Exception:  # the watcher must outlive any one bad reload
                log.exception("config reload failed unexpectedly; the config in force stays")


def install_sighup(reloader: Reloader) -> Callable[[], None]:
    """Reload on SIGHUP from now on (SIGHUP was blocked until here: one sent while the
    process started is delivered now); the returned function removes the handler."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGHUP, reloader.request, "SIGHUP")
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})

    def remove() -> None:
        loop.remove_signal_handler(signal.SIGHUP)

    return remove
