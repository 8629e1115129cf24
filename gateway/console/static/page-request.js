// One record of the request log (GET /ui/api/requests/{id}): every field, its attempts as
// a table and as a waterfall against the request's own timeline.

import { api } from "./api.js";
import { clear, count, dash, h, localTime, pill, s, seconds, tableWrap, timeCell, usd } from "./dom.js";

// shown first, in this order; any other field of the record follows, so none is hidden
const ORDER = ["id", "client_request_id", "time", "time_unix", "method", "route", "status", "error",
  "error_message", "duration_s", "ttft_s", "overhead_s", "key_name", "key_id", "model", "provider",
  "upstream_model", "stream", "finish_reason", "input_tokens", "output_tokens", "cached_tokens",
  "reasoning_tokens", "cost_usd", "cache", "cache_saved_usd"];
const LABELS = { id: "Gateway id", client_request_id: "Client x-request-id", time_unix: "Time (unix)",
  duration_s: "Duration", ttft_s: "Time to first token", overhead_s: "Gateway overhead",
  key_name: "Key name", key_id: "Key id", upstream_model: "Upstream model", cost_usd: "Cost",
  cache_saved_usd: "Cache saved", finish_reason: "Finish reason", error_message: "Error message",
  input_tokens: "Input tokens", output_tokens: "Output tokens", cached_tokens: "Cached tokens",
  reasoning_tokens: "Reasoning tokens", request_body: "Request body", response_body: "Response body" };
const BODIES = ["request_body", "response_body"];

function statusState(status) {
  if (status === null || status === undefined) return "neutral";
  if (status >= 500) return "error";
  if (status >= 400) return "warn";
  return "healthy";
}

function label(field) {
  if (LABELS[field]) return LABELS[field];
  const text = field.replace(/_/g, " ");
  return text.charAt(0).toUpperCase() + text.slice(1);
}

function pretty(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch {
    return text;
  }
}

function value(field, v, record) {
  if (v === null || v === undefined || v === "") return dash();
  if (field === "time") return timeCell(record.time_unix ?? v);
  if (field === "status") return pill(String(v), statusState(v));
  if (field.endsWith("_usd")) return usd(v);
  if (field.endsWith("_s")) return `${seconds(v)}`;
  if (field.endsWith("_tokens")) return count(v);
  if (typeof v === "boolean") return v ? "yes" : "no";
  if (BODIES.includes(field)) return h("pre.body", { tabindex: "0" }, pretty(String(v)));
  if (typeof v === "object") return h("code.mono", {}, JSON.stringify(v));
  if (field.endsWith("id") || field === "route") return h("span.mono", {}, String(v));
  return String(v);
}

function attemptsTable(attempts, start) {
  const cols = ["#", "Provider", "Key", "Model", "Started", "Seconds", "Status", "Error"];
  return h("table#attempts-table.data", {},
    h("caption.sr-only", {}, "Upstream attempts"),
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col",
      class: c === "#" || c === "Seconds" ? "num" : null }, c)))),
    h("tbody", {}, attempts.map((a, i) => h("tr", { data: { attempt: i + 1 } },
      h("td.num", {}, String(i + 1)),
      h("td", {}, a.provider || dash()),
      h("td.mono", {}, a.key || dash()),
      h("td.mono", {}, a.model || dash()),
      h("td", {}, typeof a.started === "number"
        ? h("time", { datetime: new Date(a.started * 1000).toISOString() }, localTime(a.started),
          typeof start === "number"
            ? h("span.rel", { title: "after the request arrived" }, ` +${seconds(Math.max(a.started - start, 0))}`)
            : null)
        : dash()),
      h("td.num", {}, seconds(a.seconds)),
      h("td", {}, a.status === null || a.status === undefined
        ? h("span.muted", {}, "no answer") : pill(String(a.status), statusState(a.status))),
      h("td", {}, a.error ? pill(a.error, "error") : h("span.muted", {}, "served"))))));
}

function waterfall(record, attempts) {
  const start = record.time_unix;
  const total = Math.max(record.duration_s || 0,
    ...attempts.map((a) => a.started - start + a.seconds), 0.001);
  const svg = s("svg", { class: "waterfall", role: "img", "aria-label": "Attempts on the request's timeline" });
  const rowH = 22;
  const left = 150;
  const width = 640;
  const height = (attempts.length + 1) * rowH + 20;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  const x = (t) => left + (t / total) * (width - left - 70);
  const rows = [{ name: "request", from: 0, secs: record.duration_s || 0, cls: "wf-request" },
    ...attempts.map((a, i) => ({ name: `${i + 1}. ${a.provider}/${a.key}`, from: a.started - start,
      secs: a.seconds, cls: a.error ? "wf-failed" : "wf-served" }))];
  rows.forEach((row, i) => {
    const y = 6 + i * rowH;
    svg.append(
      s("text", { x: left - 8, y: y + 11, class: "wf-label" }, row.name.slice(0, 24)),
      s("rect", { x: x(Math.max(row.from, 0)), y, height: 14, rx: 2, class: row.cls,
        width: Math.max(x(Math.max(row.from, 0) + row.secs) - x(Math.max(row.from, 0)), 2) }),
      s("text", { x: x(Math.max(row.from, 0) + row.secs) + 6, y: y + 11, class: "wf-value" },
        seconds(row.secs)));
  });
  const axisY = rows.length * rowH + 8;
  svg.append(s("line", { x1: left, x2: x(total), y1: axisY, y2: axisY, class: "wf-axis" }),
    s("text", { x: left, y: axisY + 12, class: "wf-tick" }, "0"),
    s("text", { x: x(total), y: axisY + 12, class: "wf-tick end" }, seconds(total)));
  return svg;
}

export function mountRequest(ctx) {
  const id = ctx.params[0];
  ctx.tools.append(h("a.button.ghost#back-to-requests", { href: "#/requests" }, "← Requests"));

  async function load() {
    ctx.loading();
    try {
      const record = await api.request(id, ctx.signal);
      if (ctx.left) return;
      ctx.setTitle(`Request ${record.id}`);
      const attempts = record.attempts || [];
      const fields = [...ORDER.filter((f) => f in record), "attempts",
        ...Object.keys(record).filter((f) => !ORDER.includes(f) && f !== "attempts" && !BODIES.includes(f)),
        ...BODIES.filter((f) => f in record)];
      const list = h("dl.details.record", {}, fields.map((f) =>
        h("div.detail", { data: { field: f }, class: BODIES.includes(f) ? "detail wide" : "detail" },
          h("dt", {}, label(f)), h("dd", {}, f === "attempts" ? String(attempts.length)
            : value(f, record[f], record)))));
      const attemptsPanel = h("section.panel", { "aria-labelledby": "attempts-title" },
        h("div.panel-head", {}, h("h2#attempts-title", {}, "Upstream attempts"),
          h("span.muted", {}, `${attempts.length} attempt${attempts.length === 1 ? "" : "s"}`)));
      if (attempts.length && typeof record.time_unix === "number") {
        attemptsPanel.append(h("figure.waterfall-figure", {}, waterfall(record, attempts),
          h("figcaption.muted", {}, "Each attempt on the request's timeline")));
      }
      attemptsPanel.append(tableWrap(attemptsTable(attempts, record.time_unix), "Upstream attempts"));
      if (!attempts.length) {
        attemptsPanel.append(h("p.empty-inline", {}, "No upstream was tried: the gateway answered by itself " +
          "(an error before routing, or a cache hit)."));
      }
      clear(ctx.content).append(h("section#request-detail.panel", { "aria-label": "Request record" }, list),
        attemptsPanel);
      ctx.ready();
    } catch (err) {
      if (ctx.gone(err)) return;
      if (err.code === "request_log_disabled") ctx.empty(err.message);
      else ctx.error(err, load);
    }
  }

  load();
}
