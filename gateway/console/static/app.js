// The console's shell: sign-in, the hash router and each page's lifecycle (its timers and
// fetches end when the page is left, so a page never draws into another's place).

import { api, setSession, whenSignedOut } from "./api.js";
import { clear, errorMessage, h } from "./dom.js";
import { mountOverview } from "./page-overview.js";
import { mountModels } from "./page-models.js";
import { mountKeys, mountKey } from "./page-keys.js";
import { mountRequests, mountRequest } from "./page-requests.js";
import { mountConfig } from "./page-config.js";

const $ = (selector) => document.querySelector(selector);
const views = { signin: $("#signin-view"), shell: $("#shell"), boot: $("#boot") };
const main = $("#page");
let current = null; // the page on screen: {ctx, controller, timers}
let signedIn = false;

const ROUTES = [
  { re: /^\/overview$/, page: "overview", nav: "overview", title: "Overview", mount: mountOverview },
  { re: /^\/models$/, page: "models", nav: "models", title: "Models and keys", mount: mountModels },
  { re: /^\/keys$/, page: "keys", nav: "keys", title: "Virtual keys", mount: mountKeys },
  { re: /^\/keys\/(.+)$/, page: "key", nav: "keys", title: "Virtual key", mount: mountKey },
  { re: /^\/requests$/, page: "requests", nav: "requests", title: "Requests", mount: mountRequests },
  { re: /^\/requests\/(.+)$/, page: "request", nav: "requests", title: "Request",
    mount: mountRequest },
  { re: /^\/config$/, page: "config", nav: "config", title: "Config", mount: mountConfig },
];

function parseHash() {
  const raw = location.hash.replace(/^#/, "");
  const [path, query = ""] = raw.split("?");
  for (const route of ROUTES) {
    const m = route.re.exec(path);
    if (m) {
      const params = m.slice(1).map((p) => {
        try {
          return decodeURIComponent(p);
        } catch {
          return p;
        }
      });
      return { route, params, query: new URLSearchParams(query) };
    }
  }
  return null;
}

function leave() {
  if (!current) return;
  current.ctx.left = true;
  current.controller.abort();
  for (const timer of current.timers) clearInterval(timer);
  current = null;
}

function makeContext(route, params, query) {
  const controller = new AbortController();
  const timers = [];
  const heading = h("h1#page-title", { tabindex: "-1" }, route.title);
  const tools = h("div.page-tools");
  const status = h("div.page-status", { "aria-live": "polite" });
  const content = h("div.page-content");
  clear(main).append(h("header.page-head", {}, heading, tools), status, content);
  main.dataset.page = route.page;
  main.dataset.state = "loading";
  const ctx = {
    params, query, main, heading, tools, content, status,
    signal: controller.signal,
    left: false,
    setTitle(text) {
      heading.textContent = text;
      document.title = `${text} · Gateway console`;
    },
    loading(text = "Loading…") {
      if (ctx.left) return;
      main.dataset.state = "loading";
      clear(status).append(h("p.loading", { role: "status" }, h("span.spinner"), text));
    },
    ready() {
      if (ctx.left) return;
      main.dataset.state = "ready";
      clear(status);
    },
    empty(text, ...extra) {
      if (ctx.left) return;
      main.dataset.state = "empty";
      clear(status).append(h("div.empty#page-empty", {}, h("p", {}, text), ...extra));
    },
    error(err, retry) {
      if (ctx.left) return;
      main.dataset.state = "error";
      const button = h("button#retry.button", { type: "button" }, "Retry");
      button.addEventListener("click", () => retry());
      clear(status).append(h("div.error-box", {},
        h("p#page-error", { role: "alert" }, errorMessage(err)), button));
    },
    every(ms, fn) {
      timers.push(setInterval(() => {
        if (!ctx.left && document.visibilityState !== "hidden") fn();
      }, ms));
    },
    // The fetch failed because the page was left or the session ended: draw nothing.
    gone(err) {
      return ctx.left || (err && (err.name === "AbortError" || err.status === 401));
    },
  };
  current = { ctx, controller, timers };
  return ctx;
}

function render() {
  if (!signedIn) return;
  const found = parseHash();
  if (!found) {
    location.replace("#/overview");
    return;
  }
  const previous = main.dataset.page;
  leave();
  for (const link of document.querySelectorAll("#nav a[data-nav]")) {
    if (link.dataset.nav === found.route.nav) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  const ctx = makeContext(found.route, found.params, found.query);
  ctx.setTitle(found.route.title);
  try {
    found.route.mount(ctx);
  } catch (err) {
    ctx.error(err, render);
  }
  // move focus to the new page for keyboard and screen-reader users, but not on first load
  if (previous && previous !== found.route.page && document.activeElement?.closest?.("#nav")) {
    ctx.heading.focus({ preventScroll: true });
  }
}

function show(view) {
  for (const [name, el] of Object.entries(views)) el.hidden = name !== view;
}

// --- sign-in ------------------------------------------------------------------------

const form = $("#signin");
const keyInput = $("#master-key");
const submit = $("#signin-submit");
const signinError = $("#signin-error");
const signinNote = $("#signin-note");

function showSignIn(note, error) {
  signedIn = false;
  leave();
  clear(main);
  main.dataset.state = "loading";
  setSession(null);
  signinNote.textContent = note || "";
  signinNote.hidden = !note;
  signinError.textContent = error || "";
  signinError.hidden = !error;
  show("signin");
  document.title = "Sign in · Gateway console";
  if (form.isConnected) keyInput.focus();
}

function showDisabled(message) {
  form.remove(); // no form at all: nothing can be signed into
  $("#signin-title").textContent = "The console is off";
  showSignIn("", message);
}

function enter(answer) {
  setSession(answer);
  signedIn = true;
  show("shell");
  if (!parseHash()) location.replace("#/overview"); // its hashchange renders the page
  else render();
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = keyInput.value;
  if (!key) {
    signinError.textContent = "Enter the master key (auth.master_key in the config).";
    signinError.hidden = false;
    keyInput.focus();
    return;
  }
  submit.disabled = true;
  submit.textContent = "Signing in…";
  signinError.hidden = true;
  signinNote.hidden = true;
  try {
    const answer = await api.signIn(key);
    keyInput.value = ""; // the master key does not stay in the DOM
    enter(answer);
  } catch (err) {
    if (err.code === "console_disabled") {
      showDisabled(err.message);
      return;
    }
    let message = errorMessage(err);
    if (err.status === 429 && err.retryAfter) message += ` (retry in ${err.retryAfter} s)`;
    signinError.textContent = message;
    signinError.hidden = false;
    keyInput.select();
  } finally {
    submit.disabled = false;
    submit.textContent = "Sign in";
  }
});

$("#signout").addEventListener("click", async () => {
  try {
    await api.signOut();
  } catch (err) {
    if (err.status !== 401) {
      // the session may still be alive: say so instead of pretending it ended
      current?.ctx.error(new Error(`Sign-out failed: ${errorMessage(err)}`), render);
      return;
    }
  }
  showSignIn("Signed out.");
});

whenSignedOut(() => {
  if (signedIn) showSignIn("Your session ended: sign in again.");
});

async function boot() {
  show("boot");
  try {
    enter(await api.session());
  } catch (err) {
    if (err.status === 401) showSignIn("");
    else if (err.code === "console_disabled") showDisabled(err.message);
    else showSignIn("", `The gateway did not answer the session check: ${errorMessage(err)}`);
  }
}

// the skip link must not change the hash: the router owns it
document.querySelector(".skip-link").addEventListener("click", (event) => {
  event.preventDefault();
  main.focus();
});

window.addEventListener("hashchange", render);
boot();
