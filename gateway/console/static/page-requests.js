// The request log's search (GET /ui/api/requests): filters, newest first, a page at a time
// through `next_cursor`. The filters live in the hash's query so Back returns to them.

import { api } from "./api.js";
import { clear, count, dash, errorMessage, h, pill, seconds, tableWrap, timeCell, usd } from "./dom.js";

export { mountRequest } from "./page-request.js";

const PAGE = 50;
const FIELDS = [
  ["key", "rq-key", "Key", "name or id"],
  ["model", "rq-model", "Model", "as the client sent it"],
  ["status", "rq-status", "Status", "429 or 5xx"],
  ["request_id", "rq-request-id", "Request id", "x-request-id or the gateway's id"],
];

export function statusState(status) {
  if (status >= 500) return "error";
  if (status >= 400) return "warn";
  if (status >= 200 && status < 400) return "healthy";
  return "neutral";
}

const pad = (n) => String(n).padStart(2, "0");

// datetime-local values are the browser's local time; the API wants a zone, so UTC ISO.
function localToIso(value) {
  if (!value) return null;
  const d = new Date(value);
  return Number.isNaN(d.getTime()) ? undefined : d.toISOString();
}

function isoToLocal(value) {
  const d = value ? new Date(value) : null;
  if (!d || Number.isNaN(d.getTime())) return "";
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:` +
    `${pad(d.getMinutes())}`;
}

function requestRow(entry) {
  const href = `#/requests/${encodeURIComponent(entry.id)}`;
  const attempts = entry.attempts || [];
  const row = h("tr.link-row", { data: { requestId: entry.id, clientRequestId: entry.client_request_id } },
    h("td", {}, h("a.request-link", { href, "aria-label": `Request ${entry.id}` },
      timeCell(entry.time_unix ?? entry.time))),
    h("td.mono", {}, `${entry.method || ""} ${entry.route || ""}`.trim()),
    h("td", {}, entry.model || dash(), entry.stream ? h("span.tag", {}, "stream") : null),
    h("td", {}, entry.key_name || entry.key_id || h("span.muted", {}, "master / none")),
    h("td", {}, pill(String(entry.status), statusState(entry.status)),
      entry.error ? h("span.muted.small", {}, ` ${entry.error}`) : null),
    h("td.num", {}, seconds(entry.duration_s)),
    h("td", {}, entry.provider || dash()),
    h("td.num", {}, attempts.length > 1 ? h("b", {}, String(attempts.length)) : String(attempts.length)),
    h("td.num", {}, entry.cost_usd === null || entry.cost_usd === undefined ? dash() : usd(entry.cost_usd)));
  // the whole row opens the record; the link inside stays the keyboard's way in
  row.addEventListener("click", (event) => {
    if (event.target.closest("a") || String(window.getSelection?.() || "")) return;
    location.hash = href;
  });
  return row;
}

export function mountRequests(ctx) {
  const inputs = {};
  const fields = FIELDS.map(([param, id, label, placeholder]) => {
    inputs[param] = h(`input#${id}`, { name: param, autocomplete: "off", placeholder,
      spellcheck: "false", value: ctx.query.get(param) || "" });
    return h("div.field", {}, h("label", { for: id }, label), inputs[param]);
  });
  for (const [param, id, label] of [["since", "rq-since", "Since (local time)"],
    ["until", "rq-until", "Until (local time)"]]) {
    inputs[param] = h(`input#${id}`, { name: param, type: "datetime-local", step: "1",
      value: isoToLocal(ctx.query.get(param)) });
    fields.push(h("div.field", {}, h("label", { for: id }, label), inputs[param]));
  }
  const submit = h("button#rq-submit.button.primary", { type: "submit" }, "Search");
  const reset = h("button#rq-clear.button", { type: "button" }, "Clear");
  const fieldset = h("fieldset.fields", {}, h("legend.sr-only", {}, "Filters"), fields);
  const form = h("form#request-search.create-form", { novalidate: true, role: "search",
    "aria-label": "Search the request log" }, fieldset, h("div.form-actions", {}, submit, reset));
  const resultsBox = h("div.results");
  const summary = h("span.muted");
  const moreBox = h("div.more");
  ctx.content.append(form, h("section.panel", { "aria-label": "Results" },
    h("div.panel-head", {}, h("h2", {}, "Requests"), summary), ctx.status, resultsBox, moreBox));

  let params = {};
  let body = null;
  let shown = 0;
  let generation = 0; // a later search wins over an earlier one still in flight

  function readForm() {
    const out = {};
    for (const [param] of FIELDS) {
      const value = inputs[param].value.trim();
      if (value) out[param] = value;
    }
    for (const param of ["since", "until"]) {
      const iso = localToIso(inputs[param].value);
      if (iso === undefined) throw Object.assign(new Error(`${param} is not a date and time`), { param });
      if (iso) out[param] = iso;
    }
    return out;
  }

  function mark(param) {
    for (const [name, input] of Object.entries(inputs)) {
      if (name === param) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
  }

  function showMore(cursor) {
    clear(moreBox);
    if (!cursor) return;
    const more = h("button#requests-more.button", { type: "button" }, `Load ${PAGE} more`);
    more.addEventListener("click", async () => {
      more.disabled = true;
      more.textContent = "Loading…";
      const mine = generation;
      try {
        const page = await api.requests({ ...params, limit: PAGE, cursor }, ctx.signal);
        if (ctx.left || mine !== generation) return;
        for (const entry of page.data || []) body.append(requestRow(entry));
        shown += (page.data || []).length;
        summary.textContent = `${count(shown)} shown, newest first`;
        showMore(page.next_cursor);
        if (page.next_cursor) document.querySelector("#requests-more")?.focus();
      } catch (err) {
        if (ctx.gone(err)) return;
        more.disabled = false;
        more.textContent = `Load ${PAGE} more`;
        ctx.error(err, () => more.click());
      }
    });
    moreBox.append(more);
  }

  async function search() {
    const mine = ++generation;
    ctx.loading("Searching…");
    clear(resultsBox);
    clear(moreBox);
    summary.textContent = "";
    try {
      const page = await api.requests({ ...params, limit: PAGE }, ctx.signal);
      if (ctx.left || mine !== generation) return;
      mark(null);
      const data = page.data || [];
      shown = data.length;
      if (!data.length) {
        ctx.empty(Object.keys(params).length
          ? "No request matches these filters: widen the time range or clear a filter."
          : "No requests logged yet: requests to /v1/… show here once they are answered.");
        return;
      }
      const cols = ["Time", "Route", "Model", "Key", "Status", "Duration", "Provider", "Attempts", "Cost"];
      body = h("tbody", {}, data.map(requestRow));
      resultsBox.append(tableWrap(h("table#requests-table.data", {},
        h("caption.sr-only", {}, "Logged requests, newest first"),
        h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col",
          class: ["Duration", "Attempts", "Cost"].includes(c) ? "num" : null }, c)))), body),
      "Requests"));
      summary.textContent = `${count(shown)} shown, newest first`;
      showMore(page.next_cursor);
      ctx.ready();
    } catch (err) {
      if (ctx.gone(err) || mine !== generation) return;
      if (err.code === "request_log_disabled") {
        fieldset.disabled = true;
        submit.disabled = true;
        reset.disabled = true;
        ctx.empty(errorMessage(err));
        return;
      }
      mark(err.param);
      ctx.error(err, search);
    }
  }

  form.addEventListener("submit", (event) => {
    event.preventDefault();
    try {
      params = readForm();
    } catch (err) {
      mark(err.param);
      ctx.error(err, () => form.requestSubmit());
      return;
    }
    const query = new URLSearchParams(params).toString();
    // replaceState: no hashchange, so the page (and the form's focus) stays as it is
    history.replaceState(null, "", `#/requests${query ? "?" + query : ""}`);
    search();
  });
  reset.addEventListener("click", () => {
    form.reset();
    for (const input of Object.values(inputs)) input.value = "";
    form.requestSubmit();
  });

  for (const [param] of [...FIELDS, ["since"], ["until"]]) {
    const value = ctx.query.get(param);
    if (value) params[param] = value;
  }
  search();
}
