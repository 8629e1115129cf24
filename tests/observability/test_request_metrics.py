"""The request metrics and the access log of a gateway served in the test's own loop, in
front of the fake OpenAI upstream: what each kind of request counts, that labels stay
bounded whatever clients send, and one JSON access line per request."""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from prometheus_client.parser import text_string_to_metric_families

from gateway.app import build_app
from gateway.config import parse_config
from gateway.observability.logs import ACCESS_LOGGER
from tests.upstreams.openai_upstream import FakeOpenAI

MASTER = "sk-master-obs-1"
VIRTUAL = "sk-virtual-obs-1"
POOR = "sk-virtual-poor-1"
LIMITED = "sk-virtual-rpm-1"
UPSTREAM = "sk-upstream-obs-1"
CHAT = "/v1/chat/completions"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def config(base_url: str) -> str:
    return f"""
auth: {{master_key: "{MASTER}"}}
store: {{url: "memory://"}}
providers:
  - {{name: up, kind: openai, base_url: "{base_url}", keys: [{{key: "{UPSTREAM}"}}]}}
models:
  - name: smart
    targets: [{{provider: up, model: text}}]
    price: {{input_per_mtok: 1000, output_per_mtok: 2000}}
  - name: broken
    targets: [{{provider: up, model: error-after}}]
keys:
  - {{name: ci-bot, key: "{VIRTUAL}"}}
  - {{name: poor, key: "{POOR}", budget_usd: 0.0000001}}
  - {{name: slow-lane, key: "{LIMITED}", rpm: 1}}
"""


@pytest.fixture
async def gateway() -> AsyncIterator[TestServer]:
    fake = FakeOpenAI().start()
    server = TestServer(
        build_app(parse_config(config(fake.base_url), env={})),
        host="127.0.0.1",
        handler_cancellation=True,
    )
    await server.start_server()
    try:
        yield server
    finally:
        await server.close()
        fake.stop()


async def chat(
    server: TestServer, key: str, model: str, *, stream: bool = False
) -> tuple[int, bytes, dict[str, str]]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": stream}
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            server.make_url(CHAT), json=body, headers={"Authorization": f"Bearer {key}"}
        ) as response,
    ):
        headers = {k.lower(): v for k, v in response.headers.items()}
        return response.status, await response.read(), headers


async def scrape(server: TestServer) -> tuple[str, Samples]:
    async with aiohttp.ClientSession() as session, session.get(server.make_url("/metrics")) as r:
        assert r.status == 200
        assert r.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
        text = await r.text()
    got: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            got[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, got


def value(got: Samples, name: str, **labels: str) -> float:
    return got.get((name, tuple(sorted(labels.items()))), 0.0)


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict[str, Any]]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == ACCESS_LOGGER]


async def test_served_requests_count_tokens_cost_and_timings(
    gateway: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    status, body, headers = await chat(gateway, VIRTUAL, "smart")
    assert status == 200
    usage = json.loads(body)["usage"]
    status, _, _ = await chat(gateway, VIRTUAL, "smart", stream=True)
    assert status == 200
    _, got = await scrape(gateway)

    three = {"route": CHAT, "model": "smart", "provider": "up"}
    assert value(got, "gateway_requests_total", **three, status_class="2xx") == 2
    assert value(got, "gateway_request_duration_seconds_count", **three) == 2
    assert value(got, "gateway_time_to_first_token_seconds_count", **three) == 2
    assert value(got, "gateway_overhead_seconds_count", route=CHAT, provider="up") == 2
    overhead = value(got, "gateway_overhead_seconds_sum", route=CHAT, provider="up")
    duration = value(got, "gateway_request_duration_seconds_sum", **three)
    assert 0 < overhead < duration
    tokens = {"model": "smart", "provider": "up"}
    assert value(got, "gateway_tokens_total", **tokens, kind="input") >= usage["prompt_tokens"]
    assert value(got, "gateway_tokens_total", **tokens, kind="output") >= usage["completion_tokens"]
    cost = value(got, "gateway_cost_usd_total", **tokens)
    assert cost == pytest.approx(2 * float(headers["x-gateway-cost-usd"]), rel=0.5)
    assert value(got, "gateway_active_streams", route=CHAT) == 0

    lines = access_lines(caplog)
    assert [(line["status"], line["stream"]) for line in lines] == [(200, False), (200, True)]
    first = lines[0]
    assert first["request_id"] == headers["x-request-id"]
    assert (first["route"], first["model"], first["provider"]) == (CHAT, "smart", "up")
    assert (first["upstream_model"], first["attempts"], first["key"]) == ("text", 1, "ci-bot")
    assert first["input_tokens"] == usage["prompt_tokens"]
    assert first["output_tokens"] == usage["completion_tokens"]
    assert first["cost_usd"] == pytest.approx(float(headers["x-gateway-cost-usd"]))
    assert 0 < first["overhead_s"] <= first["duration_s"]
    assert 0 < first["ttft_s"] <= first["duration_s"]
    assert first["error"] is None


async def test_rejections_by_reason_and_failed_streams(
    gateway: TestServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger=ACCESS_LOGGER)
    assert (await chat(gateway, "sk-wrong", "smart"))[0] == 401
    assert (await chat(gateway, POOR, "smart"))[0] == 429
    assert (await chat(gateway, LIMITED, "smart"))[0] == 200
    assert (await chat(gateway, LIMITED, "smart"))[0] == 429
    assert (await chat(gateway, VIRTUAL, "no-such-model"))[0] == 404
    status, body, _ = await chat(gateway, VIRTUAL, "broken", stream=True)
    assert status == 200
    assert b'"error"' in body  # failed after the commit point
    async with aiohttp.ClientSession() as session:
        for path in ("/healthz", "/readyz", "/metrics"):
            async with session.get(gateway.make_url(path)) as r:
                assert r.status == 200
    _, got = await scrape(gateway)

    for reason in ("auth", "budget_exceeded", "rate_limited", "not_found"):
        assert value(got, "gateway_rejections_total", reason=reason) == 1, reason
    broken = {"route": CHAT, "model": "broken", "provider": "up"}
    assert value(got, "gateway_requests_total", **broken, status_class="5xx") == 1
    assert value(got, "gateway_requests_total", **broken, status_class="2xx") == 0
    assert value(got, "gateway_upstream_errors_total", provider="up", kind="stream_error") == 1
    # refused before any upstream: no provider; a model that is not configured is "other"
    refused = {"route": CHAT, "model": "smart", "provider": "none"}
    assert value(got, "gateway_requests_total", **refused, status_class="4xx") == 3
    nobody = {"route": CHAT, "model": "other", "provider": "none"}
    assert value(got, "gateway_requests_total", **nobody, status_class="4xx") == 1
    assert not any(labels and ("route", "/healthz") in labels for _, labels in got)
    assert not any(("route", "/metrics") in labels for _, labels in got)

    lines = access_lines(caplog)
    assert [line["status"] for line in lines] == [401, 429, 200, 429, 404, 200]
    assert [line["error"] for line in lines] == [
        "invalid_api_key",
        "budget_exceeded",
        None,
        "rate_limit_exceeded",
        "model_not_found",
        "upstream_stream_error",
    ]
    assert [line["key"] for line in lines[1:4]] == ["poor", "slow-lane", "slow-lane"]


async def test_series_do_not_grow_with_random_models_and_keys(gateway: TestServer) -> None:
    """Clients choose model names and keys: none may become a label value."""

    async def random_requests(n: int) -> list[str]:
        sent = []
        for _ in range(n):
            name, key = secrets.token_hex(6), "sk-" + secrets.token_hex(8)
            sent += [name, key]
            await chat(gateway, key, name)  # wrong key, unknown model
            await chat(gateway, key, "smart")  # wrong key
            await chat(gateway, VIRTUAL, name)  # unknown model
            await chat(gateway, VIRTUAL, f"up/{name}")  # direct addressing, unconfigured
            await chat(gateway, MASTER, "smart" if n % 2 else f"up/{name}", stream=True)
        return sent

    await random_requests(3)
    _, before = await scrape(gateway)
    sent = await random_requests(12)
    text, after = await scrape(gateway)
    assert set(after) == set(before)
    # a wrong key is refused as such whatever the model (an unknown one no longer answers 404
    # before the key is checked): both requests of each of the 15 rounds
    assert value(after, "gateway_rejections_total", reason="auth") == 30
    for word in sent:
        assert word not in text
