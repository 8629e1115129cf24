"""The access log's way out (gateway/observability/logs.py): straight into the batch while the
logger is as `configure_logging` left it, a LogRecord through the usual machinery as soon as
anyone changed it; and the request ends the one middleware tells (a client that left: 499)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from gateway.accounting.service import ACCOUNTING
from gateway.app import build_app
from gateway.config import parse_config
from gateway.observability.logs import ACCESS_LOGGER
from gateway.observability.logs import configure_logging
from gateway.observability.logs import flush_access_log
from gateway.observability.logs import iso_time
from gateway.observability.logs import log_access_line
from gateway.store.kv import StoreUnavailable
from tests.upstreams.openai_upstream import FakeOpenAI

SECRET = "sk-master-access-log-1"
CONFIG = f'auth: {{master_key: "{SECRET}"}}\nstore: {{url: "memory://"}}\n'


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def stderr(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """configure_logging on a captured stderr; the logging setup is put back afterwards."""
    sink = io.StringIO()
    monkeypatch.setattr("sys.stderr", sink)
    root, access = logging.getLogger(), logging.getLogger(ACCESS_LOGGER)
    saved = (root.handlers[:], root.level, access.handlers[:], access.level, access.propagate)
    configure_logging(parse_config(CONFIG, env={}))
    try:
        yield sink
    finally:
        root.handlers[:], root.level = saved[0], saved[1]
        access.handlers[:], access.level, access.propagate = saved[2:]
        access.filters.clear()


def test_a_line_waits_for_the_flush_and_is_redacted(stderr: io.StringIO) -> None:
    log_access_line('{"model":"' + SECRET + '"}')
    assert stderr.getvalue() == ""  # batched
    flush_access_log()
    assert stderr.getvalue() == '{"model":"[redacted]"}\n'


def test_a_handler_added_by_an_embedder_gets_every_line(stderr: io.StringIO) -> None:
    mine = Records()
    logging.getLogger(ACCESS_LOGGER).addHandler(mine)
    log_access_line('{"n":1}')
    flush_access_log()
    assert mine.lines == ['{"n":1}']
    assert stderr.getvalue() == '{"n":1}\n'


def test_a_filter_on_the_access_logger_is_honoured(stderr: io.StringIO) -> None:
    logging.getLogger(ACCESS_LOGGER).addFilter(lambda record: '"keep"' in record.getMessage())
    log_access_line('{"drop":1}')
    log_access_line('{"keep":1}')
    flush_access_log()
    assert stderr.getvalue() == '{"keep":1}\n'


def test_iso_time_is_utc_to_the_millisecond() -> None:
    assert iso_time(1_795_000_000.1234) == "2026-11-18T11:06:40.123Z"
    assert iso_time(1_795_000_000.1239) == "2026-11-18T11:06:40.123Z"  # the same millisecond
    assert iso_time(1_795_000_000.124) == "2026-11-18T11:06:40.124Z"
    assert iso_time(1_795_000_001.0) == "2026-11-18T11:06:41.000Z"
    assert iso_time(1_795_000_000.1234) == "2026-11-18T11:06:40.123Z"  # back in time


async def test_a_client_that_leaves_is_logged_as_499(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    fake = FakeOpenAI().start()
    config = (
        CONFIG
        + "providers:\n"
        + f'  - {{name: up, kind: openai, base_url: "{fake.base_url}", keys: [{{key: k}}]}}\n'
    )
    server = TestServer(
        build_app(parse_config(config, env={})), host="127.0.0.1", handler_cancellation=True
    )
    await server.start_server()
    try:
        body = {"model": "up/hold", "messages": [{"role": "user", "content": "hi"}], "stream": True}
        async with aiohttp.ClientSession() as session:
            with pytest.raises(TimeoutError):
                async with session.post(
                    server.make_url("/v1/chat/completions"),
                    json=body,
                    headers={"Authorization": f"Bearer {SECRET}"},
                    timeout=aiohttp.ClientTimeout(total=0.3),
                ) as response:
                    await response.read()
        for _ in range(100):
            if any(r.name == ACCESS_LOGGER for r in caplog.records):
                break
            await asyncio.sleep(0.02)
    finally:
        await server.close()
        fake.stop()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [(line["status"], line["error"], line["model"]) for line in lines] == [
        (499, "client_closed", "up/hold")
    ]


async def test_a_store_error_is_counted_as_the_503_the_client_got(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler that meets a store error answers 503 store_unavailable; the access line says
    so too (it used to say 500, without an error), and the request is counted once."""
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    app = build_app(parse_config(CONFIG, env={}))

    async def store_down() -> list[object]:
        raise StoreUnavailable("sqlite store: database is locked")

    monkeypatch.setattr(app[ACCOUNTING].ledger, "list_keys", store_down)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    try:
        async with aiohttp.ClientSession() as session:
            admin = {"Authorization": f"Bearer {SECRET}"}
            async with session.get(server.make_url("/admin/keys"), headers=admin) as response:
                assert response.status == 503
                assert (await response.json())["error"]["code"] == "store_unavailable"
            async with session.get(server.make_url("/metrics")) as response:
                metrics = await response.text()
    finally:
        await server.close()
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]
    assert [(line["status"], line["error"]) for line in lines] == [(503, "store_unavailable")]
    counted = [
        line
        for line in metrics.splitlines()
        if line.startswith("gateway_requests_total{") and not line.endswith(" 0.0")
    ]
    assert len(counted) == 1
    assert 'status_class="5xx"' in counted[0]
