"""The rig, bounded (deploy/rig/, `make rig` runs the bigger one): nginx configured like the
Ingress in front of two gateways sharing a redis-server, a fake upstream, Prometheus scraping
both. One run (~20 s) serves every test of this module; each test asserts one property on
its measured figures."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from deploy.rig.client import SCENARIOS
from deploy.rig.client import Kind
from deploy.rig.client import check_stream_events
from deploy.rig.phases import MAX_BODY_BYTES
from deploy.rig.phases import run_rig
from deploy.rig.processes import Gateway
from deploy.rig.processes import Nginx
from deploy.rig.report import SMALL
from deploy.rig.report import Report

ROOT = Path(__file__).resolve().parents[2]
SIZE_UNITS = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}


RUN_BOUND_S = 50  # under pytest's 60 s: a hang fails with the stack of where it waited


@pytest.fixture(scope="module")
def report() -> Report:
    return asyncio.run(asyncio.wait_for(run_rig(SMALL), RUN_BOUND_S))


def test_every_property_held(report: Report) -> None:
    assert report.problems() == [], report.summary("tests/rig")


def test_steady_load_has_no_failure_direct_or_through_nginx(report: Report) -> None:
    for load in (report.direct, report.through):
        assert len(load.outcomes) >= 50
        assert load.failures == []
        assert load.streams >= 3 * len(load.outcomes) // 4 - 1
        assert 0 < load.percentile_ms(0.5) <= load.percentile_ms(0.99)
    # nginx really spread the load over both gateways
    served = {o.upstream for o in report.through.outcomes}
    assert len(served) == 2
    assert all(", " not in address for address in served)


def test_rolling_restart_drains_and_loses_nothing(report: Report) -> None:
    assert report.restart_load.failures == []
    assert [r.name for r in report.restarts] == ["A", "B"]
    for restart in report.restarts:
        assert (restart.readyz_before, restart.readyz_draining) == (200, 503)
        assert json.loads(restart.readyz_body) == {"status": "draining"}
        assert restart.exit_code == 0, restart.stuck_log
        assert restart.committed_in_flight  # streams nginx could no longer move elsewhere
        assert all(o.ok for o in restart.in_flight)
        assert restart.drain_s < SMALL.shutdown_grace_s  # ended by draining, not the grace
    # after each restart, nginx sent requests to the new process again
    last_sigterm = report.restarts[-1].sigterm_at
    after = {o.upstream for o in report.restart_load.outcomes if o.started > last_sigterm}
    assert {r.address for r in report.restarts} <= after


def test_rpm_holds_across_both_replicas(report: Report) -> None:
    limits = report.limits
    a, b = limits.admitted(limits.a), limits.admitted(limits.b)
    assert a > 0
    assert b > 0
    assert a + b == SMALL.rpm
    refused = [o for o in limits.rpm.outcomes if not o.ok]
    assert len(refused) == SMALL.rpm_requests - SMALL.rpm
    assert {(o.status, o.code) for o in refused} == {(429, "rate_limit_exceeded")}
    assert {o.base for o in refused} == {limits.a, limits.b}


def test_budget_holds_across_both_replicas(report: Report) -> None:
    limits = report.limits
    served = [o for o in limits.budget_outcomes if o.ok]
    refused = [o for o in limits.budget_outcomes if not o.ok]
    assert {o.base for o in served} == {limits.a, limits.b}
    assert {(o.status, o.code) for o in refused} == {(429, "budget_exceeded")}
    spend_a, spend_b = limits.spend
    assert spend_a["spend_nanos"] == spend_b["spend_nanos"]
    assert limits.spend_usd <= SMALL.budget_usd + limits.reserve_usd
    # spent, not refused early: alone, with nothing else in flight, a request no longer fits
    *served_alone, last = limits.budget_tail
    assert all(o.ok for o in served_alone)
    assert (last.status, last.code) == (429, "budget_exceeded")
    assert limits.spend_usd > SMALL.budget_usd - limits.reserve_usd
    assert limits.client_cost_usd == pytest.approx(limits.spend_usd, abs=1e-9 * len(served))
    assert float(spend_a["reserved_usd"]) == 0.0


def test_prometheus_counts_match_the_clients(report: Report) -> None:
    prom = report.prometheus
    assert sorted(prom.up.values()) == [1.0, 1.0]
    assert prom.client_counts["2xx"] > 100
    assert prom.client_counts["4xx"] > 0
    assert prom.gateway_counts == prom.client_counts
    assert sum(prom.per_target.values()) == sum(prom.client_counts.values())
    assert all(count > 0 for count in prom.per_target.values())


def test_the_checker_refuses_broken_streams() -> None:
    """The load's stream checks can fail: each kind of damage to a good stream is caught."""
    good = _tools_stream()
    assert check_stream_events(Kind("rig-tools", True), good)[0] is None
    assert len(good) == len([e for e in good if '"arguments": "{\\"user' not in e]) + 1
    lost_piece = [e for e in good if '"arguments": "{\\"user' not in e]
    missing_done = good[:-1]
    with_error = [*good[:-2], '{"error": {"message": "boom", "code": null}}', *good[-2:]]
    renamed = [e.replace("get_user", "get_users") for e in good]
    for broken in (lost_piece, missing_done, with_error, renamed):
        assert check_stream_events(Kind("rig-tools", True), broken)[0] is not None
    assert check_stream_events(Kind("rig-text", True), good)[0] is not None


def _tools_stream() -> list[str]:
    """A correct stream of the interleaved-2 scenario as the gateway renders it."""

    def chunk(delta: dict[str, object] | None, finish: str | None = None) -> str:
        choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
        body: dict[str, object] = {"object": "chat.completion.chunk", "choices": choices}
        if delta is None:
            body["usage"] = {"prompt_tokens": 11, "completion_tokens": 7, "cost_usd": 0.0003}
        return json.dumps(body)

    args = [
        json.dumps({"query": "quarterly report", "limit": 5}),
        '{"user_id": "u-42", "fields": ["name", "email"]}',
    ]
    events = [chunk({"role": "assistant", "content": None})]
    for index, name in enumerate(SCENARIOS["rig-tools"][1].calls):
        call = {"index": index, "id": f"call_{index}", "type": "function"}
        events.append(chunk({"tool_calls": [{**call, "function": {"name": name}}]}))
    for step in range(0, max(map(len, args)), 8):
        for index, text in enumerate(args):
            piece = {"index": index, "function": {"arguments": text[step : step + 8]}}
            events.append(chunk({"tool_calls": [piece]}))
    return [*events, chunk({}, "tool_calls"), chunk(None), "[DONE]"]


@pytest.fixture
def nginx_conf(tmp_path: Path) -> Iterator[str]:
    config = tmp_path / "gateway.yaml"  # never read: nginx -t does not connect upstream
    gateways = (Gateway("A", config, tmp_path), Gateway("B", config, tmp_path))
    nginx = Nginx(gateways, MAX_BODY_BYTES)
    try:
        checked = subprocess.run(
            [*nginx.command()[:-2], "-t"], capture_output=True, text=True, timeout=30
        )
        assert checked.returncode == 0, checked.stderr
        yield nginx.conf.read_text()
    finally:
        nginx.close()


def test_nginx_mirrors_the_ingress(nginx_conf: str) -> None:
    ingress = yaml.safe_load((ROOT / "deploy/k8s/base/ingress.yaml").read_text())
    notes = ingress["metadata"]["annotations"]
    prefix = "nginx.ingress.kubernetes.io/"
    location = nginx_conf.split("location /v1/ {", 1)[1].split("}", 1)[0]
    directives = dict(re.findall(r"^\s*(\w+)\s+([^;]*);", location, re.MULTILINE))
    server = dict(re.findall(r"^\s*(\w+)\s+([^;]*);", nginx_conf, re.MULTILINE))
    assert directives["proxy_buffering"] == notes[prefix + "proxy-buffering"] == "off"
    assert directives["proxy_request_buffering"] == notes[prefix + "proxy-request-buffering"]
    for name in ("proxy-read-timeout", "proxy-send-timeout"):
        assert directives[name.replace("-", "_")] == notes[prefix + name] + "s"
    size = re.fullmatch(r"(\d+)([kmg]?)", notes[prefix + "proxy-body-size"].lower())
    assert size is not None
    assert (
        int(size[1]) * SIZE_UNITS[size[2]] == MAX_BODY_BYTES == int(server["client_max_body_size"])
    )
    config = yaml.safe_load((ROOT / "deploy/k8s/base/config.yaml").read_text())
    assert config["server"]["max_body_bytes"] == MAX_BODY_BYTES
    assert directives["proxy_http_version"] == "1.1"
    assert directives["proxy_next_upstream"].split() == [
        "error",
        "timeout",
        "http_503",
        "non_idempotent",
    ]
    # nginx retries a request with request buffering off only while it holds its whole body
    assert server["client_body_buffer_size"] == "1m"
