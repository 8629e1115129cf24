"""The Grafana dashboard against real data: a real Prometheus scrapes a real gateway while a
short mixed load runs through it (successes, streams, tools, failovers, retries, key
cooldowns, upstream failures, budget and rate-limit refusals, a stream continued
after content), then every PromQL expression
of every panel, and every variable's label query, is evaluated through Prometheus's HTTP API
and must return data. Also the dashboard's structure and the provisioning files.
"""

from __future__ import annotations

import json
import re
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.e2e.conftest import UPSTREAM_KEY
from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.prometheus_server import PrometheusServer
from tests.prometheus_server import finite
from tests.upstreams.openai_upstream import FakeOpenAI

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).parents[2]
GRAFANA = ROOT / "grafana"
DATASOURCE_UID = "datasource"  # the dashboard's data source variable: panels use ${datasource}
# What Grafana puts in for its own variables, sized for a 1 s scrape interval and a load of a
# few seconds: a window that holds the whole load and several scrapes.
BUILTINS = {"__rate_interval": "30s", "__interval": "5s", "__range": "1m"}

TINY_BUDGET_KEY = "sk-gw-tiny-budget"
ONE_RPM_KEY = "sk-gw-one-rpm"
WORKERS = 3
LOAD_SCRAPES = 3  # scrapes while the load runs: every rate() needs two samples inside it
LOAD_TIMEOUT_S = 20.0
PAUSE_S = 0.01  # between one worker's requests: enough load, and CPU left for the others

HI = [{"role": "user", "content": "hi"}]
TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in ("search_documents", "get_user")
]
USAGE = {"include_usage": True}
# (name, body, virtual key, the statuses it may get)
MIX: list[tuple[str, dict[str, Any], str | None, set[int]]] = [
    ("chat", {"model": "chat", "messages": HI}, None, {200}),
    ("chat-stream", {"model": "chat", "messages": HI, "stream": True, "stream_options": USAGE},
     None, {200}),
    ("tools-stream", {"model": "tools", "messages": HI, "tools": TOOLS, "stream": True,
                      "stream_options": USAGE}, None, {200}),
    ("tools", {"model": "tools", "messages": HI, "tools": TOOLS}, None, {200}),
    ("failover", {"model": "fallback", "messages": HI}, None, {200}),
    ("failover-stream", {"model": "fallback", "messages": HI, "stream": True}, None, {200}),
    ("upstream-down", {"model": "down", "messages": HI}, None, {502, 503}),
    ("upstream-refuses", {"model": "refused", "messages": HI}, None, {400}),
    ("unknown-model", {"model": "no-such-model", "messages": HI}, None, {404}),
    ("budget", {"model": "chat", "messages": HI}, TINY_BUDGET_KEY, {429}),
    ("rpm", {"model": "chat", "messages": HI}, ONE_RPM_KEY, {200, 429}),
    ("cached", {"model": "cached", "messages": HI}, None, {200}),
    ("recovered-stream", {"model": "recovering", "messages": HI, "stream": True}, None, {200}),
]  # fmt: skip


def gateway_config(upstream: FakeOpenAI) -> str:
    """Providers whose keys fail in every way key health knows: `flaky` has a rejected key and
    a rate-limited one before its good one (auth_failed and rate_limited cooldowns, retries);
    `dead` answers 500 (failovers, circuit_open); `picky` answers 400 (not retried)."""
    url = upstream.base_url
    price = "{input_per_mtok: 2.0, output_per_mtok: 8.0}"
    return f"""
server: {{shutdown_grace_s: 2}}
store: {{url: "memory://"}}
# a queue of 3 flushed each second: records are written and, under the load, dropped
request_log: {{flush_s: 1, queue_max: 3}}
# one model caches (its identical requests are hits); the others' requests are bypasses
cache: {{store: memory}}
routing: {{cooldown_s: 0.05, auth_hold_s: 0.05, circuit_failures: 3, circuit_open_s: 0.05,
          circuit_max_open_s: 0.05}}
providers:
  - {{name: main, kind: openai, base_url: "{url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  - name: flaky
    kind: openai
    base_url: "{url}"
    keys:
      - {{key: sk-bad-1, weight: 1000}}
      - {{key: sk-rl-1, weight: 100}}
      - {{key: "{UPSTREAM_KEY}"}}
  - {{name: dead, kind: openai, base_url: "{url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  - {{name: picky, kind: openai, base_url: "{url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  # breaks its streams after content (a provider of its own: its circuit opens and closes
  # without touching `main`'s)
  - {{name: breaking, kind: openai, base_url: "{url}", keys: [{{key: "{UPSTREAM_KEY}"}}]}}
  # an OpenAI-compatible server that continues answers (the fake answers its text anew:
  # the dashboard needs the recovery counted, not the joined answer)
  - {{name: compat, kind: openai, base_url: "{url}", keys: [{{key: "{UPSTREAM_KEY}"}}],
      continuation: continue_final_message}}
models:
  - {{name: chat, targets: [{{provider: main, model: text}}], price: {price}}}
  - {{name: tools, targets: [{{provider: flaky, model: interleaved-2}}], price: {price}}}
  - name: fallback
    targets:
      - {{provider: dead, model: fail-500, priority: 0}}
      - {{provider: main, model: text, priority: 1}}
    price: {price}
  - name: recovering
    recovery: {{mode: continue}}
    targets:
      - {{provider: breaking, model: error-after, priority: 0}}
      - {{provider: compat, model: text, priority: 1}}
  - {{name: down, targets: [{{provider: dead, model: fail-500}}]}}
  - {{name: refused, targets: [{{provider: picky, model: fail-400}}]}}
  - {{name: cached, targets: [{{provider: main, model: text}}], price: {price},
      cache: {{mode: exact}}}}
keys:
  - {{name: tiny-budget, key: {TINY_BUDGET_KEY}, budget_usd: 0.000001}}
  - {{name: one-rpm, key: {ONE_RPM_KEY}, rpm: 1}}
"""


class Load:
    """WORKERS threads sending MIX round and round until `stop()`; what each got is counted."""

    def __init__(self, gateway: Gateway) -> None:
        self._url = gateway.v1 + "/chat/completions"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.statuses: Counter[tuple[str, int]] = Counter()
        self.failures: list[str] = []
        self._threads = [threading.Thread(target=self._run, args=(i,)) for i in range(WORKERS)]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(30)

    def _run(self, offset: int) -> None:
        with httpx.Client(timeout=10) as client:
            step = offset
            while not self._stop.is_set():
                name, body, key, expected = MIX[step % len(MIX)]
                step += 1
                headers = {"authorization": f"Bearer {key}"} if key else {}
                try:
                    with client.stream("POST", self._url, json=body, headers=headers) as answer:
                        answer.read()
                        status = answer.status_code
                except httpx.HTTPError as err:  # recorded: a thread must not raise
                    with self._lock:
                        self.failures.append(f"{name}: {err!r}")
                    continue
                with self._lock:
                    self.statuses[name, status] += 1
                    if status not in expected:
                        self.failures.append(f"{name}: status {status}, expected {expected}")
                self._stop.wait(PAUSE_S)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusServer]:
    """A Prometheus that scraped the gateway during the load, and once more after it."""
    upstream = FakeOpenAI().start()
    gateway = start_gateway(gateway_config(upstream), tmp_path_factory.mktemp("gw-dashboard"))
    server = PrometheusServer(gateway.url.removeprefix("http://"))
    try:
        server.start()
        load = Load(gateway).start()
        try:
            # Prometheus's first scrape comes a few seconds after its start (target discovery)
            server.wait_scrapes(LOAD_SCRAPES, timeout=LOAD_TIMEOUT_S)
        finally:
            load.stop()
        server.wait_scrapes(1)
        assert not load.failures, load.failures[:10]
        assert {name for name, _ in load.statuses} == {name for name, *_ in MIX}
        yield server
    finally:
        server.close()
        stop_gateway(gateway)
        upstream.stop()


def test_every_panel_query_returns_data(prometheus: PrometheusServer) -> None:
    """Data, and for a rate (which the load drove) more than zeros: a series made at startup
    and never counted would otherwise pass. A gauge may read 0 once the load is over."""
    empty = []
    for panel in panels(dashboard()):
        for target in panel["targets"]:
            expr = substitute(target["expr"])
            series = [s for s in prometheus.query(expr) if finite(s)]
            if "rate(" in expr:
                series = [s for s in series if float(s["value"][1]) > 0]
            print(f"{panel['title']} [{target['refId']}]: {len(series)} series  {expr}")
            if not series:
                empty.append(f"{panel['title']!r} [{target['refId']}]: {expr}")
    assert not empty, "panels whose query returned no data:\n" + "\n".join(empty)


def test_every_variable_lists_values(prometheus: PrometheusServer) -> None:
    variables = [v for v in dashboard()["templating"]["list"] if v["type"] == "query"]
    assert variables
    for variable in variables:
        metric, label = label_query(variable["definition"])
        values = prometheus.api(f"/api/v1/label/{label}/values", **{"match[]": metric})
        assert values, f"variable {variable['name']}: no values for {variable['definition']}"


def test_dashboard_structure() -> None:
    board = dashboard()
    assert board["uid"]
    assert board["title"]
    assert board["schemaVersion"] >= 39  # Grafana 11 and later
    everything = list(panels(board, rows=True))
    ids = [p["id"] for p in everything]
    assert len(ids) == len(set(ids)), f"panel ids repeat: {sorted(ids)}"
    datasource = {"type": "prometheus", "uid": f"${{{DATASOURCE_UID}}}"}
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert variables[DATASOURCE_UID]["type"] == "datasource"
    assert variables[DATASOURCE_UID]["query"] == "prometheus"
    for panel in panels(board):
        title = panel["title"]
        assert panel["datasource"] == datasource, title
        assert panel["targets"], f"{title}: no targets"
        assert panel["fieldConfig"]["defaults"].get("unit"), f"{title}: no unit"
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), f"{title}: refIds repeat"
        for target in panel["targets"]:
            assert target["datasource"] == datasource, title
            assert target["expr"].strip(), title
            if panel["type"] == "timeseries":
                assert target["legendFormat"], f"{title} [{target['refId']}]: no legend"
    assert_grid_has_no_overlaps(everything)


def assert_grid_has_no_overlaps(everything: list[dict[str, Any]]) -> None:
    cells: dict[tuple[int, int], str] = {}
    for panel in everything:
        pos = panel["gridPos"]
        assert pos["x"] >= 0, panel["title"]
        assert pos["x"] + pos["w"] <= 24, f"{panel['title']}: wider than the grid"
        for x in range(pos["x"], pos["x"] + pos["w"]):
            for y in range(pos["y"], pos["y"] + pos["h"]):
                other = cells.setdefault((x, y), panel["title"])
                assert other == panel["title"], f"{panel['title']} overlaps {other}"


def test_dashboard_shows_every_documented_metric() -> None:
    documented = set(re.findall(r"^\| `(gateway_\w+)` \|", docs_metrics(), re.MULTILINE))
    assert len(documented) >= 10, "docs/metrics.md lists its metrics in a table"
    expressions = " ".join(queries(dashboard()))
    missing = {
        name for name in documented if not re.search(rf"\b{name}(_bucket|_sum)?\b", expressions)
    }
    assert not missing, f"metrics no panel shows: {sorted(missing)}"


def test_provisioning_files_point_at_the_dashboard_and_prometheus() -> None:
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    assert sources["apiVersion"] == 1
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus"
    assert source["url"].startswith("http")
    boards = yaml.safe_load((GRAFANA / "provisioning/dashboards/gateway.yaml").read_text())
    assert boards["apiVersion"] == 1
    (provider,) = boards["providers"]
    assert provider["type"] == "file"
    path = provider["options"]["path"]
    readme = (GRAFANA / "README.md").read_text()
    # the README's mount puts grafana/dashboards/ (with gateway.json) at the provider's path
    assert f"grafana/dashboards:{path}" in readme, f"README mounts no grafana/dashboards at {path}"
    assert (GRAFANA / "dashboards/gateway.json").is_file()


def docs_metrics() -> str:
    return (ROOT / "docs/metrics.md").read_text()


def dashboard() -> dict[str, Any]:
    board: dict[str, Any] = json.loads((GRAFANA / "dashboards/gateway.json").read_text())
    return board


def panels(board: dict[str, Any], rows: bool = False) -> Iterator[dict[str, Any]]:
    """Every panel, those inside collapsed rows too; the rows themselves only with `rows`."""
    for panel in board["panels"]:
        if panel["type"] == "row":
            if rows:
                yield panel
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(board: dict[str, Any]) -> list[str]:
    return [target["expr"] for panel in panels(board) for target in panel["targets"]]


def substitute(expr: str) -> str:
    """`expr` as Grafana sends it with every variable at its default: a query variable's "All"
    (its allValue regex), Grafana's own interval variables as BUILTINS says."""
    values = dict(BUILTINS)
    for variable in dashboard()["templating"]["list"]:
        if variable["type"] == "query":
            values[variable["name"]] = variable["allValue"]

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise AssertionError(f"unknown variable ${name} in {expr}")
        return values[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def label_query(definition: str) -> tuple[str, str]:
    """(metric selector, label) of a variable's `label_values(metric, label)`."""
    match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", definition)
    assert match, f"not a label_values() query: {definition}"
    return substitute(match.group(1)), match.group(2)
