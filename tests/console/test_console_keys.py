"""Virtual keys in chromium: a key created in the console is shown once in #key-secret and
serves openai-python; "done" takes the secret out of the DOM; the search filters the table;
revoking asks first (cancel keeps the key), and once confirmed the same secret gets 401."""

from __future__ import annotations

import openai
import pytest
from playwright.sync_api import expect

from tests.console.conftest import MODEL
from tests.console.conftest import WAIT_MS
from tests.console.conftest import ConsoleGateway
from tests.console.conftest import ConsoleTab
from tests.console.conftest import send_chats

pytestmark = pytest.mark.e2e

NAME = "console-made"
# anywhere in the document: its HTML, its text, or an input's value (not in the HTML)
IN_DOM = """secret => document.documentElement.outerHTML.includes(secret)
  || document.body.innerText.includes(secret)
  || [...document.querySelectorAll("input, textarea")].some(e => e.value.includes(secret))"""


def test_a_key_made_in_the_console_serves_until_revoked(
    signed_in: ConsoleTab, console_gw: ConsoleGateway
) -> None:
    tab, page = signed_in, signed_in.page
    tab.go("#/keys", "keys", ("ready", "empty"))
    page.fill("input#key-name", NAME)
    page.fill("input#key-budget", "5")
    page.select_option("select#key-period", "monthly")
    page.fill("input#key-rpm", "600")
    page.click("button#key-create-submit")

    box = page.locator("#key-secret")
    expect(box).to_have_count(1, timeout=WAIT_MS)
    assert box.evaluate("e => e.tagName") == "INPUT"
    assert box.get_attribute("readonly") is not None
    secret = box.input_value()
    assert len(secret) >= 20, secret
    expect(page.locator("button#key-secret-copy")).to_be_visible()
    row = page.locator("table#keys-table tr[data-key-id]", has_text=NAME)
    expect(row).to_have_count(1, timeout=WAIT_MS)
    key_id = row.get_attribute("data-key-id")
    assert key_id
    tab.screenshot("key-created")

    stored = console_gw.admin(f"/admin/keys/{key_id}")
    assert (stored["name"], stored["budget_usd"], stored["budget_period"], stored["rpm"]) == (
        NAME,
        5.0,
        "monthly",
        600,
    )
    send_chats(console_gw, 1, key=secret)  # the new key serves

    page.click("button#key-secret-done")
    expect(box).to_have_count(0, timeout=WAIT_MS)
    assert not page.evaluate(IN_DOM, secret), "the secret is still in the page"

    search = page.locator("input#key-search")
    search.fill("no-such-key-name")
    expect(row).to_be_hidden(timeout=WAIT_MS)
    search.fill(NAME[:7])
    expect(row).to_be_visible(timeout=WAIT_MS)
    tab.screenshot("keys")

    revoke = page.locator(f'button.revoke[data-key-id="{key_id}"]')
    revoke.click()
    page.click("button#revoke-cancel")
    expect(page.locator("button#revoke-confirm")).to_have_count(0, timeout=WAIT_MS)
    assert console_gw.admin(f"/admin/keys/{key_id}")["revoked"] is False

    revoke.click()
    page.click("button#revoke-confirm")
    expect(revoke).to_have_count(0, timeout=WAIT_MS)  # only an active key has the button
    assert console_gw.admin(f"/admin/keys/{key_id}")["revoked"] is True
    with console_gw.client(secret) as client, pytest.raises(openai.AuthenticationError):
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])


def test_a_keys_name_links_to_its_detail(signed_in: ConsoleTab, console_gw: ConsoleGateway) -> None:
    made = console_gw.admin("/admin/keys", "POST", {"name": "detail-shown", "budget_usd": 2})
    send_chats(console_gw, 1, key=made["key"])  # a row of spend by model
    tab, page = signed_in, signed_in.page
    tab.go("#/keys", "keys")
    row = page.locator(f'table#keys-table tr[data-key-id="{made["id"]}"]')
    row.locator(f'a[href="#/keys/{made["id"]}"]').click()
    tab.ready("key", ("ready", "empty"))
    detail = page.locator("#key-detail")
    expect(detail).to_contain_text("detail-shown", timeout=WAIT_MS)
    expect(detail).to_contain_text(made["id"])
    expect(page.locator("table#key-spend-table")).to_have_count(1)
    assert not page.evaluate(IN_DOM, made["key"])
