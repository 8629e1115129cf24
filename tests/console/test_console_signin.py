"""Signing in and out of the console in chromium: a wrong key and a virtual key are refused
(the error shown, no session, no cookie); the master key (Enter in the field) lands on the
overview with an HttpOnly, SameSite=Strict cookie the page's script cannot read; sign-out
returns to the sign-in view and a reload stays there; the page is served with the CSP; and
the keyboard alone reaches the nav links and follows one with Enter."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from gateway.console.routes import CSP
from gateway.console.sessions import COOKIE
from tests.console.conftest import MASTER
from tests.console.conftest import WAIT_MS
from tests.console.conftest import ConsoleGateway
from tests.console.conftest import ConsoleTab

pytestmark = pytest.mark.e2e

NAV_LINKS = ["#/overview", "#/models", "#/keys", "#/requests", "#/config"]


def session_cookies(tab: ConsoleTab) -> list[dict[str, object]]:
    return [dict(c) for c in tab.context.cookies() if c["name"] == COOKIE]


def try_sign_in(tab: ConsoleTab, key: str) -> None:
    page = tab.page
    page.wait_for_selector("form#signin input#master-key", timeout=WAIT_MS)
    page.fill("input#master-key", key)
    page.click("button#signin-submit")


def assert_refused(tab: ConsoleTab) -> None:
    error = tab.page.locator("#signin-error")
    expect(error).to_be_visible(timeout=WAIT_MS)
    expect(error).to_contain_text("not the master key", timeout=WAIT_MS)
    assert error.get_attribute("role") == "alert"
    expect(tab.page.locator("nav#nav")).to_be_hidden(timeout=WAIT_MS)
    assert session_cookies(tab) == []
    assert tab.session_status() == 401


def test_the_page_comes_with_the_csp_and_a_labelled_sign_in_form(tab: ConsoleTab) -> None:
    answer = tab.open()
    assert answer.headers["content-security-policy"] == CSP
    assert answer.headers["x-frame-options"] == "DENY"
    page = tab.page
    page.wait_for_selector("form#signin", timeout=WAIT_MS)
    assert page.get_attribute("input#master-key", "type") == "password"
    expect(page.locator('label[for="master-key"]')).to_have_count(1)
    assert page.get_attribute("html", "lang") == "en"
    assert page.title().strip()
    tab.screenshot("signin")


def test_a_wrong_key_is_refused(tab: ConsoleTab) -> None:
    tab.open()
    try_sign_in(tab, "mk-not-the-master-key")
    assert_refused(tab)


def test_a_virtual_key_is_refused(tab: ConsoleTab, console_gw: ConsoleGateway) -> None:
    made = console_gw.admin("/admin/keys", "POST", {"name": "not-for-the-console"})
    tab.open()
    try_sign_in(tab, made["key"])
    assert_refused(tab)


def test_the_master_key_signs_in_to_the_overview(tab: ConsoleTab) -> None:
    tab.open()
    page = tab.page
    page.wait_for_selector("form#signin input#master-key", timeout=WAIT_MS)
    page.fill("input#master-key", MASTER)
    page.press("input#master-key", "Enter")
    tab.ready("overview", ("ready", "empty"))
    nav = page.locator("nav#nav")
    expect(nav).to_be_visible(timeout=WAIT_MS)
    for href in NAV_LINKS:
        expect(nav.locator(f'a[href="{href}"]')).to_have_count(1)
    expect(nav.locator('a[href="#/overview"]')).to_have_attribute("aria-current", "page")
    expect(page.locator("button#signout")).to_be_visible()

    [cookie] = session_cookies(tab)
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/ui"
    assert COOKIE not in page.evaluate("document.cookie")
    assert tab.session_status() == 200


def test_sign_out_returns_to_sign_in_and_a_reload_stays_out(signed_in: ConsoleTab) -> None:
    tab, page = signed_in, signed_in.page
    tab.expected_errors.add(("/ui/api/", 401))  # a 401 means "sign in again" (docs/console.md)
    page.click("button#signout")
    page.wait_for_selector("form#signin", timeout=WAIT_MS)
    expect(page.locator("nav#nav")).to_be_hidden(timeout=WAIT_MS)
    assert session_cookies(tab) == []
    page.reload(wait_until="load")
    page.wait_for_selector("form#signin input#master-key", timeout=WAIT_MS)
    expect(page.locator("nav#nav")).to_be_hidden(timeout=WAIT_MS)
    assert tab.session_status() == 401


def test_tab_reaches_the_nav_and_enter_follows_a_link(signed_in: ConsoleTab) -> None:
    tab, page = signed_in, signed_in.page
    page.evaluate("() => document.activeElement && document.activeElement.blur()")
    target = 'nav#nav a[href="#/models"]'
    seen = []
    for _ in range(30):  # from the top of the page: the nav comes within a few stops
        page.keyboard.press("Tab")
        seen.append(page.evaluate("() => document.activeElement.outerHTML.slice(0, 80)"))
        if page.evaluate("s => document.activeElement.matches(s)", target):
            break
    else:
        pytest.fail(f"Tab never reached {target}; focus went: {seen}")
    outline = page.evaluate(
        "() => { const s = getComputedStyle(document.activeElement);"
        " return [s.outlineStyle, s.outlineWidth, s.boxShadow]; }"
    )
    assert outline[0] != "none" or outline[2] != "none", f"no visible focus: {outline}"
    page.keyboard.press("Enter")
    tab.ready("models")
    expect(page.locator(target)).to_have_attribute("aria-current", "page", timeout=WAIT_MS)
    assert page.evaluate("location.hash") == "#/models"
