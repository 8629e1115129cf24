"""Hostile data in chromium: a key named, and a request made for a model named, with markup
that would run script if the console put it in as HTML. The pages show the text as text, no
element of it appears, nothing runs (the watch of every tab also fails on a CSP violation);
and a key's detail shows its own spend by model, not another key's."""

from __future__ import annotations

import openai
import pytest
from playwright.sync_api import expect

from tests.console.conftest import WAIT_MS
from tests.console.conftest import ConsoleGateway
from tests.console.conftest import ConsoleTab
from tests.console.conftest import send_chats
from tests.console.test_console_requests import logged

pytestmark = pytest.mark.e2e

MARKUP = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


def test_markup_in_names_is_shown_as_text_and_runs_nothing(
    signed_in: ConsoleTab, console_gw: ConsoleGateway
) -> None:
    created = console_gw.admin("/admin/keys", "POST", {"name": MARKUP})
    with console_gw.client() as client, pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model=MARKUP,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={"x-request-id": "console-hostile-1"},
        )
    logged(console_gw, "console-hostile-1")
    tab, page = signed_in, signed_in.page

    tab.go("#/keys", "keys")
    row = page.locator(f'table#keys-table tr[data-key-id="{created["id"]}"]')
    expect(row).to_contain_text(MARKUP, timeout=WAIT_MS)  # the markup, as text
    assert row.locator("img, script").count() == 0

    tab.go("#/requests", "requests", ("ready", "empty"))
    page.fill("input#rq-request-id", "console-hostile-1")
    page.click("button#rq-submit")
    logged_row = page.locator('table#requests-table tr[data-client-request-id="console-hostile-1"]')
    expect(logged_row).to_contain_text(MARKUP, timeout=WAIT_MS)
    assert logged_row.locator("img, script").count() == 0
    assert page.locator("main#page img").count() == 0
    assert page.evaluate("() => window.__xss") is None


def test_a_keys_detail_shows_its_own_spend_by_model(
    signed_in: ConsoleTab, console_gw: ConsoleGateway
) -> None:
    mine = console_gw.admin("/admin/keys", "POST", {"name": "spender"})
    idle = console_gw.admin("/admin/keys", "POST", {"name": "idle"})
    send_chats(console_gw, 2, key=mine["key"])
    tab, page = signed_in, signed_in.page
    tab.go(f"#/keys/{mine['id']}", "key")
    table = page.locator("table#key-spend-table")
    expect(table.locator("tr:has(td)")).to_have_count(1, timeout=WAIT_MS)
    expect(table).to_contain_text("main/text")  # the upstream that served it
    tab.go(f"#/keys/{idle['id']}", "key")
    # a key that spent nothing shows no model, not the gateway's whole spend
    expect(page.locator("#page")).to_contain_text("No spend recorded yet", timeout=WAIT_MS)
    expect(page.locator("table#key-spend-table tr:has(td)")).to_have_count(0)
