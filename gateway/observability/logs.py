"""Where the gateway's log lines go and what they look like (config `logging:`).

One stderr handler on the root logger, at `logging.level`: plain text or one JSON object per
line (`logging.format`). The access log (logger `gateway.access`, one JSON line per request,
gateway/observability/access.py) has a handler of its own that writes its lines as they are,
and does not propagate, so an operator can route it (attach a handler to `gateway.access`)
without it appearing twice. That handler buffers: a write syscall per request costs more
than building the line, so lines leave in batches, when 32 KB are waiting and at least every
`ACCESS_FLUSH_S` (the app's flusher task, `flush_access_log`) and at exit. While that
handler is the logger's only one (no filter, no other formatter), an access line is handed
to it without a LogRecord (`log_access_line`: making and dispatching a record costs more
than the line itself); any other setup gets a record as usual. Records do not carry the
pid, thread or process name (a `getpid` syscall per record on Linux); the formats put this
process's pid in themselves.

Secrets: no code path puts one in a message, and every formatter here also replaces any
configured secret (provider keys, the master key, static virtual keys, the store's password)
that reached a formatted line, tracebacks included, with `[redacted]`, so a library that
echoes a key in an exception message cannot leak it either.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Iterable
from types import TracebackType
from typing import TextIO
from urllib.parse import urlsplit

import msgspec

from gateway.config import Config
from gateway.config import LoggingConfig
from gateway.config import Secret
from gateway.config_base import env_proxy_secrets

ACCESS_LOGGER = "gateway.access"
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s[{pid}]: %(message)s"
ACCESS_FLUSH_S = 0.2
ACCESS_BUFFER_BYTES = 32768
REDACTED = "[redacted]"
_encoder = msgspec.json.Encoder()


def configured_secrets(config: Config) -> list[str]:
    """Every secret value in `config` (the ones a log line must never show)."""
    found: list[Secret | str | None] = [config.auth.master_key]
    for provider in config.providers:
        found += provider.secrets()  # its keys' and its proxy's credentials
    found += env_proxy_secrets(os.environ)
    found += [k.key for k in config.keys]
    found.append(urlsplit(config.store.url).password)
    values = {s.reveal() if isinstance(s, Secret) else s for s in found if s}
    # longest first: a secret that contains another is replaced whole
    return sorted((v for v in values if v), key=len, reverse=True)


def redact(text: str, secrets: Iterable[str]) -> str:
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, REDACTED)
    return text


class TextFormatter(logging.Formatter):
    def __init__(self, secrets: list[str]) -> None:
        super().__init__(TEXT_FORMAT.format(pid=os.getpid()))
        self._secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record), self._secrets)


class JsonFormatter(logging.Formatter):
    """`{"ts", "level", "logger", "pid", "message", "exc_info"?}` per line."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self._secrets = secrets
        self._pid = os.getpid()

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "ts": iso_time(record.created),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": self._pid,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exc_info"] = self.formatException(record.exc_info)
        return redact(_encoder.encode(line).decode(), self._secrets)


class AccessFormatter(logging.Formatter):
    """The access line is JSON already (built from our own fields, never a secret); this
    only guards against one that reached it anyway."""

    def __init__(self, secrets: list[str]) -> None:
        super().__init__()
        self._secrets = secrets

    def format(self, record: logging.LogRecord) -> str:
        return self.format_line(record.getMessage())

    def format_line(self, line: str) -> str:
        return redact(line, self._secrets)


class BatchingHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes its lines in batches (see the module docstring)."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._size = 0

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:
            self.handleError(record)
            return
        self.add(line)

    def add(self, line: str) -> None:
        """A formatted line into the batch (the caller holds the handler's lock)."""
        self._lines.append(line)
        self._size += len(line)
        if self._size >= ACCESS_BUFFER_BYTES:
            self.flush()

    def flush(self) -> None:
        with self.lock or contextlib.nullcontext():
            lines, self._lines, self._size = self._lines, [], 0
            try:
                self.stream.flush()
                if lines:
                    self._write(lines)
            except (OSError, ValueError):
                # a stream that is gone (closed, a full disk): logging must never take a
                # request or the shutdown down with it; the lines are dropped
                pass

    def _write(self, lines: list[str]) -> None:
        """The lines in pieces of whole lines, each one write() of at most PIPE_BUF bytes
        where the stream is a file descriptor: the workers of `--workers N` share stderr,
        and a write that size is never interleaved with another process's, on a pipe or a
        file, so no line is ever cut by another worker's."""
        try:
            fd = self.stream.fileno()
        except (AttributeError, OSError, ValueError):
            self.stream.write("\n".join(lines) + "\n")
            return
        piece: list[bytes] = []
        size = 0
        for line in lines:
            data = line.encode("utf-8", "replace") + b"\n"
            if piece and size + len(data) > PIPE_BUF:
                _write_all(fd, b"".join(piece))
                piece, size = [], 0
            piece.append(data)
            size += len(data)
        if piece:
            _write_all(fd, b"".join(piece))


PIPE_BUF = 4096  # POSIX's atomic pipe write size on Linux


def _write_all(fd: int, data: bytes) -> None:
    while data:
        written = os.write(fd, data)
        data = data[written:]


def flush_access_log() -> None:
    for handler in _access_logger.handlers:
        handler.flush()


def log_access_line(line: str) -> None:
    """`line` at info on the access logger (the caller knows that level is enabled): straight
    into the batch when the logger is as `configure_logging` left it, else as a LogRecord."""
    logger = _access_logger
    handlers = logger.handlers
    if len(handlers) == 1 and not (logger.filters or logger.propagate or logger.disabled):
        handler = handlers[0]
        formatter = handler.formatter
        if (
            type(handler) is BatchingHandler
            and type(formatter) is AccessFormatter
            and handler.level <= logging.INFO
            and not handler.filters
        ):
            with handler.lock or contextlib.nullcontext():
                handler.add(formatter.format_line(line))
            return
    # made directly: Logger.info would look up the caller's frame, which the line never names
    logger.handle(logger.makeRecord(ACCESS_LOGGER, logging.INFO, "", 0, line, (), None))


_access_logger = logging.getLogger(ACCESS_LOGGER)


def iso_time(epoch: float) -> str:
    """`epoch` as UTC ISO 8601 to the millisecond (`2026-11-30T08:13:22.882Z`)."""
    global _milli, _milli_text, _second, _second_text
    milli = int(epoch * 1000)
    if milli == _milli:  # several lines a millisecond under load: one text for them all
        return _milli_text
    second = milli // 1000
    if second != _second:  # one strftime per second, not per line
        _second, _second_text = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    _milli, _milli_text = milli, f"{_second_text}.{milli % 1000:03d}Z"
    return _milli_text


_second, _second_text = -1, ""
_milli, _milli_text = -1, ""


def configure_logging(config: Config) -> None:
    """Set up this process's logging from `config.logging` (the supervisor and every worker
    call it: a spawned worker starts with logging unconfigured)."""
    options: LoggingConfig = config.logging
    secrets = configured_secrets(config)
    handler = logging.StreamHandler(sys.stderr)
    fmt = JsonFormatter(secrets) if options.format == "json" else TextFormatter(secrets)
    handler.setFormatter(fmt)
    # a getpid syscall, a thread and a process name per record that no format here uses
    logging.logProcesses = logging.logThreads = logging.logMultiprocessing = False
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(options.level.upper())

    access = logging.getLogger(ACCESS_LOGGER)
    for old in list(access.handlers):
        access.removeHandler(old)
    access.propagate = False
    if options.access_log:
        access_handler = BatchingHandler(sys.stderr)
        access_handler.setFormatter(AccessFormatter(secrets))
        access.addHandler(access_handler)
        access.setLevel(logging.NOTSET)  # follows the root's level
    else:
        access.setLevel(logging.CRITICAL + 1)
    # An exception nothing caught is printed by Python's own handler, past the formatters
    # above; sent through the root logger instead, its secrets are redacted like any line.
    sys.excepthook = _log_uncaught


def _log_uncaught(
    kind: type[BaseException], value: BaseException, tb: TracebackType | None
) -> None:
    logging.getLogger("gateway").critical("uncaught exception", exc_info=(kind, value, tb))
