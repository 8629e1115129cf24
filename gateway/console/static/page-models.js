// Models and provider keys (GET /ui/api/health), refreshed every 5 s: which targets each
// model has, why a target's keys are skipped, and every provider key's state and limits.

import { api } from "./api.js";
import { clear, compact, dash, h, localTime, pill, relative, seconds, tableWrap } from "./dom.js";

const REFRESH_MS = 5000;
const STATE_ORDER = ["healthy", "cooldown", "rate_limited", "probing", "half_open",
  "circuit_open", "auth_failed"];

function until(value) {
  if (value === null || value === undefined) return null;
  return h("time", { datetime: new Date(value * 1000).toISOString() },
    localTime(value, false), " ", h("span.rel", {}, `(${relative(value)})`));
}

function meter(used, limit) {
  const text = limit === null || limit === undefined
    ? h("span", {}, compact(used ?? 0), h("span.muted", {}, " / no limit"))
    : h("span", {}, compact(used ?? 0), h("span.muted", {}, ` / ${compact(limit)}`));
  if (!limit) return text;
  const fill = h("span.meter-fill");
  const ratio = Math.min((used || 0) / limit, 1);
  fill.style.width = `${(ratio * 100).toFixed(1)}%`;
  if (ratio >= 1) fill.classList.add("full");
  else if (ratio >= 0.8) fill.classList.add("high");
  return h("span.meter-cell", {}, text, h("span.meter", { "aria-hidden": "true" }, fill));
}

function whyItems(target) {
  const items = [];
  for (const detail of target.keys_detail || []) {
    if (detail.usable) continue;
    for (const why of detail.why || []) {
      items.push(h("li.why", { data: { key: detail.key, reason: why.reason } },
        h("span.why-key", {}, detail.key), " ",
        pill(why.reason, why.reason), " ",
        why.until ? h("span.why-until", {}, "until ", until(why.until)) : null,
        why.detail ? h("span.why-detail", {}, why.detail) : null));
    }
  }
  return items;
}

function targetItem(target) {
  const healthy = target.healthy_keys ?? 0;
  const total = target.keys ?? 0;
  const keyState = total === 0 ? "none" : healthy === total ? "healthy"
    : healthy === 0 ? "circuit_open" : "cooldown";
  const why = whyItems(target);
  return h("li.target", { data: { provider: target.provider, targetModel: target.model } },
    h("div.target-main", {},
      h("span.target-name", {}, h("span.muted", {}, `${target.provider} / `), target.model),
      h("span.target-meta", {}, `priority ${target.priority} · weight ${target.weight}`),
      h("span.target-keys", { title: "keys usable for this target now / keys" },
        pill(`${healthy} of ${total} ${total === 1 ? "key" : "keys"} usable`, keyState))),
    why.length ? h("ul.why-list", { "aria-label": "Why keys are skipped" }, why) : null);
}

function modelsTable(models) {
  const body = h("tbody");
  for (const model of models) {
    const targets = model.targets || [];
    body.append(h("tr", { data: { model: model.name } },
      h("th.model-name", { scope: "row" }, model.name),
      h("td", {}, targets.length
        ? h("ul.targets", {}, targets.map(targetItem))
        : h("span.muted", {}, "no targets"))));
  }
  return h("table#models-table.data", {},
    h("caption.sr-only", {}, "Models and their targets"),
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "Model"),
      h("th", { scope: "col" }, "Targets (provider / upstream model), keys, why skipped"))),
    body);
}

function unavailable(key) {
  const parts = [];
  if (key.unavailable_until) parts.push(h("div", {}, "every model: ", until(key.unavailable_until)));
  for (const [model, when] of Object.entries(key.cooldowns || {})) {
    if (when) parts.push(h("div.cooldown", {}, `${model}: `, until(when)));
  }
  return parts.length ? parts : dash();
}

function providersTable(providers) {
  const body = h("tbody");
  for (const provider of providers) {
    for (const key of provider.keys || []) {
      body.append(h("tr", { data: { provider: provider.name, key: key.key } },
        h("td", {}, provider.name),
        h("td.mono", {}, key.key),
        h("td.state", { data: { state: key.state } }, pill(key.state, key.state)),
        h("td.until", {}, unavailable(key)),
        h("td.num", {}, String(key.in_flight ?? 0)),
        h("td.num", {}, key.ewma_ttft_s === null || key.ewma_ttft_s === undefined
          ? dash() : seconds(key.ewma_ttft_s)),
        h("td", {}, meter(key.rpm?.used, key.rpm?.limit)),
        h("td", {}, meter(key.tpm?.used, key.tpm?.limit)),
        h("td.num", { title: "consecutive failures / circuit opens" },
          `${key.consecutive_failures ?? 0} / ${key.circuit_opens ?? 0}`),
        h("td.num", {}, String(key.weight ?? 1))));
    }
  }
  const cols = ["Provider", "Key", "State", "Unavailable until", "In flight", "EWMA TTFT",
    "RPM used / limit", "TPM used / limit", "Failures / opens", "Weight"];
  return h("table#providers-table.data", {},
    h("caption.sr-only", {}, "Provider keys and their health"),
    h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col",
      class: ["In flight", "EWMA TTFT", "Failures / opens", "Weight"].includes(c) ? "num" : null }, c)))),
    body);
}

function summary(providers) {
  const counts = {};
  for (const p of providers) for (const k of p.keys || []) counts[k.state] = (counts[k.state] || 0) + 1;
  const states = Object.keys(counts).sort((a, b) => {
    const ia = STATE_ORDER.indexOf(a);
    const ib = STATE_ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib);
  });
  return h("div.summary", { "aria-label": "Provider keys by state" },
    states.map((st) => h("span.summary-item", {}, pill(st, st), h("b", {}, String(counts[st])))));
}

export function mountModels(ctx) {
  const updated = h("span.updated");
  ctx.tools.append(updated);
  const modelsSection = h("section.panel", { "aria-labelledby": "models-title" });
  const providersSection = h("section.panel", { "aria-labelledby": "providers-title" });
  let busy = false;
  let built = false;

  function render(report) {
    const models = report.models || [];
    const providers = report.providers || [];
    clear(modelsSection).append(
      h("div.panel-head", {}, h("h2#models-title", {}, "Models"),
        h("span.muted", {}, `${models.length} configured`)),
      models.length ? tableWrap(modelsTable(models), "Models")
        : h("p.empty-inline", {}, "No models configured: add a models: section to the config."));
    clear(providersSection).append(
      h("div.panel-head", {}, h("h2#providers-title", {}, "Provider keys"), summary(providers)),
      providers.length ? tableWrap(providersTable(providers), "Provider keys")
        : h("p.empty-inline", {}, "No providers configured: add a providers: section to the config."));
    if (!built) {
      ctx.content.append(modelsSection, providersSection);
      built = true;
    }
  }

  async function load(first) {
    if (busy) return;
    busy = true;
    if (first) ctx.loading();
    try {
      const report = await api.health(ctx.signal);
      if (ctx.left) return;
      updated.textContent = `Updated ${localTime(Date.now() / 1000, false)} · every 5 s`;
      // keep the reader's place: a redraw replaces the tables, not the page
      const wraps = [...ctx.content.querySelectorAll(".table-wrap")];
      const scrollers = wraps.map((el) => el.scrollLeft);
      const focused = wraps.indexOf(document.activeElement);
      render(report);
      [...ctx.content.querySelectorAll(".table-wrap")].forEach((el, i) => {
        el.scrollLeft = scrollers[i] || 0;
        if (i === focused) el.focus({ preventScroll: true });
      });
      if (!(report.models || []).length && !(report.providers || []).length) {
        ctx.empty("No models or providers are configured: add providers: and models: to the " +
          "config file and reload the gateway.");
      } else ctx.ready();
    } catch (err) {
      if (!ctx.gone(err)) ctx.error(err, () => load(!built));
    } finally {
      busy = false;
    }
  }

  load(true);
  ctx.every(REFRESH_MS, () => load(false));
}
