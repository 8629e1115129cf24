"""The overview's samples: quantiles as Prometheus interpolates them, a point from two
merged snapshots (only /v1/ routes counted, errors by class, cost per hour, active streams),
an hour kept; and on an in-process gateway, real traffic turned into a point of the console's
overview (its own calls not counted), and why a cooling key is skipped."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import msgspec
import pytest
from aiohttp.test_utils import TestServer

from gateway.app import build_app
from gateway.config import ConfigError
from gateway.config import parse_config
from gateway.console.overview import OverviewSampler
from gateway.console.overview import Snapshot
from gateway.console.overview import point
from gateway.console.overview import quantile
from gateway.console.overview import summarise
from gateway.console.routes import CONSOLE
from gateway.observability.registry import Registry
from tests.upstreams.openai_upstream import FakeOpenAI

BOUNDS = (0.1, 0.5, 1.0)
MASTER = {"Authorization": "Bearer mk-test"}
_key = msgspec.json.Encoder().encode


def test_quantile_interpolates_within_the_bucket() -> None:
    assert quantile(0.5, [0, 0, 0, 0], BOUNDS) is None
    assert quantile(0.5, [10, 0, 0, 0], BOUNDS) == pytest.approx(0.05)
    assert quantile(0.5, [0, 4, 0, 0], BOUNDS) == pytest.approx(0.3)
    assert quantile(0.95, [0, 0, 0, 7], BOUNDS) == 1.0  # above every bound: the highest
    assert quantile(0.95, [90, 0, 10, 0], BOUNDS) == pytest.approx(0.75)


def values(requests: dict[tuple[str, str], float], durations: list[float], cost: float) -> dict:
    out = {}
    for (route, status_class), count in requests.items():
        out[_key(["gateway_requests_total", route, "m", "p", status_class])] = [count]
    out[_key(["gateway_request_duration_seconds", "/v1/chat/completions", "m", "p"])] = [
        *durations,
        1.0,
    ]
    out[_key(["gateway_time_to_first_token_seconds", "/v1/chat/completions", "m", "p"])] = [
        *durations,
        1.0,
    ]
    out[_key(["gateway_cost_usd_total", "m", "p"])] = [cost]
    out[_key(["gateway_active_streams", "/v1/chat/completions"])] = [3.0]
    return out


def test_a_point_is_the_interval_between_two_snapshots() -> None:
    before = summarise(
        values({("/v1/chat/completions", "2xx"): 10}, [10, 0, 0, 0], 0.5), BOUNDS, 100.0
    )
    after = summarise(
        values(
            {
                ("/v1/chat/completions", "2xx"): 28,
                ("/v1/chat/completions", "5xx"): 1,
                ("/v1/chat/completions", "4xx"): 1,
                ("/ui/api/overview", "2xx"): 500,  # the console's own calls: not traffic
                ("/admin/keys", "2xx"): 50,
            },
            [10, 20, 0, 0],
            0.6,
        ),
        BOUNDS,
        110.0,
    )
    p = point(before, after, BOUNDS)
    assert p.rps == pytest.approx(2.0)
    assert p.error_ratio == pytest.approx(0.1)
    assert p.server_error_ratio == pytest.approx(0.05)
    assert p.p50_s == pytest.approx(0.3)
    assert p.ttft_p95_s == pytest.approx(0.48)
    assert p.cost_per_hour_usd == pytest.approx(36.0)
    assert p.active_streams == 3
    idle = point(after, Snapshot(**{**msgspec.structs.asdict(after), "at": 120.0}), BOUNDS)
    assert (idle.rps, idle.error_ratio, idle.p50_s) == (0.0, None, None)


async def test_the_sampler_keeps_an_hour() -> None:
    registry = Registry()
    sampler = OverviewSampler(registry, BOUNDS, 10.0)
    for _ in range(400):
        await sampler.sample()
    assert len(sampler.points) == 360
    assert sampler.report()["window_s"] == 3600.0


def test_the_console_section_is_checked() -> None:
    for bad in ("session_ttl_s: 5", "overview_interval_s: 0", "overview_interval_s: .nan"):
        with pytest.raises(ConfigError, match="console"):
            parse_config(f"console: {{{bad}}}\n", env={})
    with pytest.raises(ConfigError, match="console"):
        parse_config("console: {colour: blue}\n", env={})


@pytest.fixture
async def gateway(tmp_path: Path) -> AsyncIterator[TestServer]:
    fake = FakeOpenAI().start()
    config = parse_config(
        f"""
store: {{url: "sqlite:///{tmp_path / "gw.db"}"}}
auth: {{master_key: mk-test}}
console: {{overview_interval_s: 60}}
providers:
  - name: up
    kind: openai
    base_url: "{fake.base_url}"
    keys: [{{key: k1, name: first}}, {{key: sk-rl-60, name: limited}}]
models: [{{name: chat, targets: [{{provider: up, model: text}}]}}]
""",
        env={},
    )
    server = TestServer(build_app(config), host="127.0.0.1")
    await server.start_server()
    yield server
    await server.close()
    fake.stop()


async def test_traffic_becomes_a_point_and_a_cooling_key_says_why(gateway: TestServer) -> None:
    sampler = gateway.app[CONSOLE].sampler
    async with aiohttp.ClientSession() as http:
        for _ in range(20):
            async with http.post(
                gateway.make_url("/v1/chat/completions"),
                json={"model": "chat", "messages": [{"role": "user", "content": "hi"}]},
                headers=MASTER,
            ) as answer:
                assert answer.status == 200, await answer.text()
        await sampler.sample()
        latest = sampler.points[-1]
        assert latest.rps > 0
        assert latest.p50_s is not None
        assert latest.error_ratio == 0.0
        async with http.get(gateway.make_url("/admin/health"), headers=MASTER) as answer:
            health = await answer.json()
    (target,) = health["models"][0]["targets"]
    details = {d["key"]: d for d in target["keys_detail"]}
    assert details["first"] == {"key": "first", "usable": True, "why": []}
    (why,) = details["limited"]["why"]  # its 429 (Retry-After: 60) keeps it out
    assert why["reason"] == "rate_limited"
    assert why["until"] > 0
    assert details["limited"]["usable"] is False
