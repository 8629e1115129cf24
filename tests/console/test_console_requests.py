"""The request log and the config in chromium: a request is found by the x-request-id its
client sent and its detail shows every attempt; the config page shows the sha256 of the file
the gateway read, and neither the master key nor an upstream key is anywhere in its HTML."""

from __future__ import annotations

import json
import time
import urllib.parse
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.console.conftest import MODEL
from tests.console.conftest import SECRETS
from tests.console.conftest import WAIT_MS
from tests.console.conftest import ConsoleGateway
from tests.console.conftest import ConsoleTab

pytestmark = pytest.mark.e2e

CLIENT_ID = "console-test-123"


def logged(gw: ConsoleGateway, client_id: str, timeout: float = 10.0) -> dict[str, Any]:
    """The request's record, once the request log's writer (every 0.5 s) has it."""
    query = urllib.parse.urlencode({"request_id": client_id})
    deadline = time.monotonic() + timeout
    while True:
        found = gw.admin(f"/admin/requests?{query}")["data"]
        if found:
            record: dict[str, Any] = found[0]
            return record
        if time.monotonic() > deadline:
            pytest.fail(f"request {client_id} not in the request log after {timeout} s")
        time.sleep(0.1)


def test_a_request_is_found_by_its_client_request_id(
    signed_in: ConsoleTab, console_gw: ConsoleGateway
) -> None:
    with console_gw.client() as client:
        client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": CLIENT_ID},
        )
    record = logged(console_gw, CLIENT_ID)
    tab, page = signed_in, signed_in.page
    tab.go("#/requests", "requests", ("ready", "empty"))
    page.fill("input#rq-request-id", CLIENT_ID)
    page.click("button#rq-submit")
    row = page.locator(f'table#requests-table tr[data-client-request-id="{CLIENT_ID}"]')
    expect(row).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("table#requests-table tr[data-request-id]")).to_have_count(1)
    assert row.get_attribute("data-request-id") == record["id"]
    expect(row).to_contain_text(MODEL)
    expect(row).to_contain_text("200")
    tab.screenshot("requests")

    row.locator(f'a[href="#/requests/{record["id"]}"]').first.click()
    tab.ready("request")
    detail = page.locator("#request-detail")
    expect(detail).to_contain_text(record["id"], timeout=WAIT_MS)
    expect(detail).to_contain_text(CLIENT_ID)
    attempts = page.locator("table#attempts-table tr:has(td)")
    expect(attempts).to_have_count(len(record["attempts"]), timeout=WAIT_MS)
    [attempt] = record["attempts"]
    expect(attempts.first).to_contain_text(attempt["provider"])
    expect(attempts.first).to_contain_text(attempt["key"])
    tab.screenshot("request")


def test_the_config_page_shows_the_files_hash_and_no_secret(
    signed_in: ConsoleTab, console_gw: ConsoleGateway
) -> None:
    tab, page = signed_in, signed_in.page
    tab.go("#/config", "config")
    expect(page.locator("#config-sha256")).to_have_text(console_gw.config_sha256())
    expect(page.locator("#config-path")).to_contain_text(str(console_gw.config_path))
    expect(page.locator("#config-loaded-at")).not_to_be_empty()
    expect(page.locator("#config-last-reload")).to_contain_text("none since start")
    shown = json.loads(page.locator("pre#config-json").inner_text())
    assert shown["auth"]["master_key"] == "***"
    assert shown["console"]["overview_interval_s"] == 1
    assert {k["key"] for p in shown["providers"] for k in p["keys"]} == {"***"}
    html = page.content()
    leaked = [secret[:6] for secret in SECRETS if secret in html]
    assert leaked == [], f"secrets in the config page's HTML: {leaked}"
    tab.screenshot("config")
