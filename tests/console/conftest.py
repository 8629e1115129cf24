"""The operator console (/ui/, docs/console.md) in a real browser: Debian's chromium driven by
Playwright (its own driver, shipped in the wheel; no browser is ever downloaded), in front of
a real gateway process with a sqlite store, the request log and two providers on the fake
OpenAI upstream: `main`, whose key serves, and `limited`, whose key (`sk-rl-60`) the fake
answers with 429 and `Retry-After: 60`, so that it cools down the first time it is tried.

One chromium for the package, a fresh context (cookies, storage) per test. Every page a test
opens is watched (`ConsoleTab`): each request the browser makes must go to the gateway's own
127.0.0.1:port, and a console error, an uncaught page error or a Content-Security-Policy
violation (chromium's "Refused to ..." message, and the `securitypolicyviolation` DOM event,
listened for from an init script, which runs outside the page's CSP) fails the test, as does
the master key or an upstream key in the page's HTML when the test ends.

Screenshots go to the test's tmp_path and, when CONSOLE_SCREENSHOTS_DIR is set, are copied
there too (`CONSOLE_SCREENSHOTS_DIR=docs/console pytest tests/console` refreshes the docs').
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import openai
import pytest

try:
    from playwright.sync_api import Browser
    from playwright.sync_api import BrowserContext
    from playwright.sync_api import ConsoleMessage
    from playwright.sync_api import Page
    from playwright.sync_api import Response
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright
except ImportError as missing:  # a dev extra (pyproject.toml)
    raise ImportError("tests/console needs playwright: `make .venv/.installed`") from missing

from tests.e2e.conftest import Gateway
from tests.e2e.conftest import start_gateway
from tests.e2e.conftest import stop_gateway
from tests.upstreams.openai_upstream import FakeOpenAI

CHROMIUM = Path("/usr/bin/chromium")
# This machine reaches no outside network: nothing in the background may try. Playwright's
# launch makes a fresh profile (--user-data-dir) of its own in a temporary directory, here
# under the package's tmp dir (TMPDIR of its driver); it refuses the flag from the caller.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
MASTER = "mk-console-browser-5d21e9c0"
UPSTREAM_KEY = "sk-up-console-main-7731f0"
LIMITED_KEY = "sk-rl-60"  # the fake upstream answers it 429 with Retry-After: 60
SECRETS = (MASTER, UPSTREAM_KEY, LIMITED_KEY)
MODEL = "chat"  # main's key only
SPILL = "spill"  # limited first (429, cooldown), then main
# USD per million tokens: priced models, so a key with a budget may use them
PRICE = "{input_per_mtok: 3, output_per_mtok: 15}"
WAIT_MS = 10_000  # the bound of every wait for the page
WIDE = {"width": 1280, "height": 800}
NARROW = {"width": 400, "height": 800}
SCREENSHOTS_ENV = "CONSOLE_SCREENSHOTS_DIR"
# what chromium logs for an answer with an error status (the fetch itself handles it)
HTTP_ERROR_LOG = "Failed to load resource: the server responded with a status of "

CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", (e) => {
  window.__consoleTestCspViolation({
    directive: e.violatedDirective, blocked: e.blockedURI, source: e.sourceFile,
    line: e.lineNumber, sample: e.sample,
  });
}, true);
"""


@dataclass
class ConsoleGateway:
    gateway: Gateway
    config_path: Path

    @property
    def url(self) -> str:
        return self.gateway.url

    @property
    def netloc(self) -> str:
        return urllib.parse.urlsplit(self.gateway.url).netloc

    def admin(self, path: str, method: str = "GET", body: Any = None) -> Any:
        """The admin API with the master key as Bearer (not through the browser)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {MASTER}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=10) as answer:
            return json.loads(answer.read())

    def client(self, key: str = MASTER) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.gateway.v1, api_key=key, max_retries=0, timeout=20)

    def config_sha256(self) -> str:
        return hashlib.sha256(self.config_path.read_bytes()).hexdigest()


def console_config(upstream: FakeOpenAI, db: Path) -> str:
    return f"""
auth: {{master_key: {MASTER}}}
store: {{url: "sqlite:///{db}"}}
request_log: {{}}
console: {{overview_interval_s: 1}}
providers:
  - name: main
    kind: openai
    base_url: "{upstream.base_url}"
    keys: [{{name: primary, key: {UPSTREAM_KEY}}}]
  - name: limited
    kind: openai
    base_url: "{upstream.base_url}"
    keys: [{{name: rl, key: {LIMITED_KEY}}}]
models:
  - name: {MODEL}
    targets: [{{provider: main, model: text}}]
    price: {PRICE}
  - name: {SPILL}
    price: {PRICE}
    targets:
      - {{provider: limited, model: text, priority: 0}}
      - {{provider: main, model: text, priority: 1}}
"""


@pytest.fixture(scope="package")
def console_gw(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleGateway]:
    fake = FakeOpenAI().start()
    tmp = tmp_path_factory.mktemp("console-gw")
    gateway = start_gateway(console_config(fake, tmp / "gw.db"), tmp)
    try:
        yield ConsoleGateway(gateway, tmp / "gateway.yaml")
    finally:
        stop_gateway(gateway)
        fake.stop()


@pytest.fixture(scope="package")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    if not (CHROMIUM.is_file() and os.access(CHROMIUM, os.X_OK)):
        pytest.fail(f"{CHROMIUM} is missing: run `bash tests/install_deps.sh` (Debian's chromium)")
    # the driver starts now and keeps this TMPDIR: chromium's fresh profile is made in it
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TMPDIR", str(tmp_path_factory.mktemp("chromium")))
        playwright = sync_playwright().start()
    try:
        chromium = playwright.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_FLAGS, headless=True, timeout=30_000
        )
        try:
            yield chromium
        finally:
            chromium.close()
    finally:
        playwright.stop()


@dataclass
class ConsoleTab:
    """One browser context with its page on the console, watched as the module says."""

    context: BrowserContext
    page: Page
    gw: ConsoleGateway
    artifacts: Path
    requests: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    # (path prefix, status) whose error answers the console is expected to meet
    expected_errors: set[tuple[str, int]] = field(
        default_factory=lambda: {("/ui/api/session", 401)}
    )

    # --- watching -------------------------------------------------------------------------

    @classmethod
    def new(cls, context: BrowserContext, gw: ConsoleGateway, artifacts: Path) -> ConsoleTab:
        """The context watched before its page exists, so the page's first load is too."""
        requests: list[str] = []
        problems: list[str] = []
        context.on("request", lambda request: requests.append(request.url))
        context.expose_binding(
            "__consoleTestCspViolation",
            lambda source, violation: problems.append(f"CSP violation (DOM event): {violation}"),
        )
        context.add_init_script(CSP_LISTENER)
        tab = cls(context, context.new_page(), gw, artifacts, requests, problems)
        tab.page.on("console", tab._on_console)
        tab.page.on("pageerror", lambda err: problems.append(f"page error: {err}"))
        return tab

    def _on_console(self, message: ConsoleMessage) -> None:
        text = message.text
        where = message.location.get("url", "")
        csp = "Content Security Policy" in text or text.startswith("Refused to")
        if message.type != "error" and not csp:
            return
        if not csp and text.startswith(HTTP_ERROR_LOG):
            status = text.removeprefix(HTTP_ERROR_LOG).split(" ", 1)[0]
            path = urllib.parse.urlsplit(where).path
            if any(
                path.startswith(prefix) and status == str(code)
                for prefix, code in self.expected_errors
            ):
                return
        self.problems.append(f"console {message.type}: {text} (at {where})")

    def foreign_requests(self) -> list[str]:
        """Requests to anywhere but the gateway (data: and blob: URLs stay in the page)."""
        foreign = []
        for url in self.requests:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme in ("data", "blob"):
                continue
            if parts.scheme not in ("http", "https") or parts.netloc != self.gw.netloc:
                foreign.append(url)
        return foreign

    def verdict(self) -> list[str]:
        """Everything wrong with what the browser did; [] when nothing was."""
        wrong = [f"request to another host: {url}" for url in self.foreign_requests()]
        if not self.page.is_closed():
            self.page.evaluate("1")  # delivers any violation report still on its way
            html = self.page.content()
            wrong += [f"a secret ({s[:6]}...) in the page's HTML" for s in SECRETS if s in html]
        return wrong + self.problems

    # --- driving --------------------------------------------------------------------------

    def open(self, route: str = "") -> Response:
        answer = self.page.goto(f"{self.gw.url}/ui/{route}", wait_until="load")
        assert answer is not None
        assert answer.status == 200, answer.status
        return answer

    def sign_in(self) -> None:
        """Signs in through the API (the context's cookie jar), then opens the overview."""
        answer = self.context.request.post(
            f"{self.gw.url}/ui/api/session", data={"master_key": MASTER}
        )
        assert answer.status == 200, answer.text()
        self.open("#/overview")
        self.ready("overview")

    def go(self, route: str, name: str, states: tuple[str, ...] = ("ready",)) -> str:
        self.page.evaluate("route => { location.hash = route; }", route)
        return self.ready(name, states)

    def ready(self, name: str, states: tuple[str, ...] = ("ready",)) -> str:
        """Waits until `main#page` shows page `name` rendered (or failed); its state must be
        one of `states`."""
        done = ", ".join(
            f'main#page[data-page="{name}"][data-state="{state}"]'
            for state in ("ready", "empty", "error")
        )
        try:
            self.page.wait_for_selector(done, timeout=WAIT_MS)
        except PlaywrightTimeout:
            seen = self.page.evaluate(
                "() => { const m = document.querySelector('main#page');"
                " return m ? [m.dataset.page, m.dataset.state] : null; }"
            )
            pytest.fail(f"page {name} not rendered within {WAIT_MS} ms: main#page is {seen}")
        state = self.page.get_attribute("main#page", "data-state") or ""
        if state not in states:
            error = self.page.locator("#page-error")
            why = error.inner_text() if error.count() else "(no #page-error)"
            pytest.fail(f"page {name}: data-state={state}, wanted {states}: {why}")
        return state

    def screenshot(self, name: str) -> Path:
        path = self.artifacts / f"{name}.png"
        self.page.screenshot(path=str(path), animations="disabled")  # the viewport
        docs = os.environ.get(SCREENSHOTS_ENV)
        if docs:
            Path(docs).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(docs) / path.name)
        return path

    def session_status(self) -> int:
        return self.context.request.get(f"{self.gw.url}/ui/api/session").status


OpenTab = Callable[..., ConsoleTab]


@pytest.fixture
def open_tab(browser: Browser, console_gw: ConsoleGateway, tmp_path: Path) -> Iterator[OpenTab]:
    """Opens watched tabs (a fresh context each); when the test ends, each must be clean."""
    tabs: list[ConsoleTab] = []
    artifacts = tmp_path / "screenshots"
    artifacts.mkdir()

    def open_tab(viewport: dict[str, int] = WIDE) -> ConsoleTab:
        context = browser.new_context(viewport=viewport, base_url=console_gw.url)  # type: ignore[arg-type]
        context.set_default_timeout(WAIT_MS)
        context.set_default_navigation_timeout(WAIT_MS)
        tab = ConsoleTab.new(context, console_gw, artifacts)
        tabs.append(tab)
        return tab

    yield open_tab
    wrong: list[str] = []
    for tab in tabs:
        try:
            wrong += tab.verdict()
        finally:
            tab.context.close()
    assert wrong == [], "\n".join(wrong)


@pytest.fixture
def tab(open_tab: OpenTab) -> ConsoleTab:
    return open_tab()


@pytest.fixture
def signed_in(tab: ConsoleTab) -> ConsoleTab:
    tab.sign_in()
    return tab


def send_chats(gw: ConsoleGateway, count: int, model: str = MODEL, key: str = MASTER) -> None:
    with gw.client(key) as client:
        for _ in range(count):
            answer = client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "hi"}]
            )
            assert answer.choices[0].message.content


def http_status(url: str, headers: dict[str, str] | None = None) -> int:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as err:
        return int(err.code)
