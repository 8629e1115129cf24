"""The overview and the models page in chromium: after real chat completions (openai-python
through the gateway) the overview charts them (a drawn rps line, every metric's chart and
latest value); the models page lists each model's targets and every provider key; after the
`limited` key's upstream answers 429 with Retry-After: 60, its providers row says cooldown and
the model's row says why; and at 400 px nothing but a table's own wrapper scrolls sideways."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.console.conftest import MODEL
from tests.console.conftest import NARROW
from tests.console.conftest import SPILL
from tests.console.conftest import WAIT_MS
from tests.console.conftest import ConsoleGateway
from tests.console.conftest import ConsoleTab
from tests.console.conftest import OpenTab
from tests.console.conftest import send_chats

pytestmark = pytest.mark.e2e

METRICS = ["rps", "error_ratio", "latency", "ttft", "cost", "streams"]
# a polyline or path of two vertices or more with both a width and a height: a line of data
# that is not flat (a burst of requests among quiet intervals)
DRAWN_LINE = """metric => {
  const svg = document.querySelector(`svg.chart[data-metric="${metric}"]`);
  if (!svg) return false;
  for (const el of svg.querySelectorAll("polyline, path")) {
    const coords = el.tagName === "polyline"
      ? el.points.numberOfItems
      : ((el.getAttribute("d") || "").match(/-?\\d*\\.?\\d+(?:e-?\\d+)?/gi) || []).length / 2;
    if (coords < 2) continue;
    const box = el.getBBox();
    if (box.width > 0 && box.height > 0) return true;
  }
  return false;
}"""


def overview_points(tab: ConsoleTab) -> list[dict[str, Any]]:
    answer = tab.context.request.get(f"{tab.gw.url}/ui/api/overview")
    assert answer.status == 200, answer.text()
    points: list[dict[str, Any]] = answer.json()["points"]
    return points


def wait_for_sampled_traffic(tab: ConsoleTab, timeout: float = 15.0) -> list[dict[str, Any]]:
    """Until the sampler (every second here) has a point with the traffic and one without."""
    deadline = time.monotonic() + timeout
    while True:
        points = overview_points(tab)
        rates = [p["rps"] for p in points]
        if any(r > 0 for r in rates) and len(set(rates)) > 1:
            return points
        if time.monotonic() > deadline:
            pytest.fail(f"the overview never sampled the traffic: {points}")
        time.sleep(0.2)


def test_the_overview_charts_real_traffic(
    signed_in: ConsoleTab, console_gw: ConsoleGateway
) -> None:
    tab, page = signed_in, signed_in.page
    send_chats(console_gw, 8)
    wait_for_sampled_traffic(tab)
    page.reload(wait_until="load")  # a first render with the samples in
    tab.ready("overview")
    for metric in METRICS:
        chart = page.locator(f'figure svg.chart[data-metric="{metric}"]')
        expect(chart).to_have_count(1, timeout=WAIT_MS)
        caption = page.locator(f'figure:has(svg.chart[data-metric="{metric}"]) figcaption')
        expect(caption).not_to_be_empty()
        expect(page.locator(f'.stat[data-metric="{metric}"]')).to_have_count(1)
    page.wait_for_function(DRAWN_LINE, arg="rps", timeout=WAIT_MS)
    expect(page.locator('.stat[data-metric="rps"]')).to_have_text(re.compile(r"\d"))
    tab.screenshot("overview")


def test_the_models_page_lists_targets_and_provider_keys(signed_in: ConsoleTab) -> None:
    tab, page = signed_in, signed_in.page
    tab.go("#/models", "models")
    chat = page.locator(f'table#models-table tr[data-model="{MODEL}"]')
    expect(chat).to_have_count(1, timeout=WAIT_MS)
    expect(chat).to_contain_text("main")
    spill = page.locator(f'table#models-table tr[data-model="{SPILL}"]')
    expect(spill).to_contain_text("limited")
    primary = page.locator('table#providers-table tr[data-provider="main"][data-key="primary"]')
    expect(primary).to_have_count(1)
    expect(primary.locator("td.state")).to_have_attribute("data-state", "healthy")
    expect(primary.locator("td.state")).to_contain_text("healthy")
    rl = page.locator('table#providers-table tr[data-provider="limited"][data-key="rl"]')
    expect(rl).to_have_count(1)


def test_a_429_puts_the_key_in_cooldown_and_says_why(
    signed_in: ConsoleTab, console_gw: ConsoleGateway
) -> None:
    tab, page = signed_in, signed_in.page
    send_chats(console_gw, 1, model=SPILL)  # limited: 429 (Retry-After: 60), then main serves
    health = console_gw.admin("/admin/health")
    [limited] = [p for p in health["providers"] if p["name"] == "limited"]
    assert limited["keys"][0]["state"] == "cooldown", limited  # the server's side of it

    tab.go("#/models", "models")
    rl = 'table#providers-table tr[data-provider="limited"][data-key="rl"]'
    state = page.locator(f"{rl} td.state")
    expect(state).to_have_attribute("data-state", "cooldown", timeout=WAIT_MS)
    expect(state).to_contain_text(re.compile(r"cooldown|rate.?limited", re.I))
    why = page.locator(f'table#models-table tr[data-model="{SPILL}"] .why')
    expect(why.first).to_contain_text(re.compile(r"rate.?limited", re.I), timeout=WAIT_MS)
    expect(why.first).to_contain_text("429")
    main = page.locator('table#providers-table tr[data-provider="main"][data-key="primary"]')
    expect(main.locator("td.state")).to_have_attribute("data-state", "healthy")
    tab.screenshot("models")


PAGES = [
    ("#/overview", "overview"),
    ("#/models", "models"),
    ("#/keys", "keys"),
    ("#/requests", "requests"),
    ("#/config", "config"),
]


def test_at_400_px_nothing_overflows_sideways(open_tab: OpenTab) -> None:
    tab = open_tab(NARROW)
    tab.sign_in()
    for route, name in PAGES:
        tab.go(route, name, ("ready", "empty"))
        width = tab.page.evaluate("document.documentElement.scrollWidth")
        assert width <= NARROW["width"] + 2, f"{route}: the page is {width} px wide"
        right = tab.page.evaluate("document.querySelector('nav#nav').getBoundingClientRect().right")
        assert right <= NARROW["width"] + 2, f"{route}: the nav ends at {right} px"
