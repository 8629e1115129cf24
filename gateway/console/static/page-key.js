// One virtual key (GET /ui/api/keys/{id}) with its spend (GET /ui/api/spend).

import { api } from "./api.js";
import { barChart } from "./charts.js";
import { clear, count, dash, h, pill, s, tableWrap, timeCell, usd } from "./dom.js";

const WINDOW_NAMES = { daily: "UTC day", weekly: "ISO week", monthly: "month" };

// [what the key is, the pill colour it gets]
export function keyStatus(key) {
  if (key.revoked) return ["revoked", "revoked"];
  if (key.expired) return ["expired", "expired"];
  return ["active", "healthy"];
}

function definitions(pairs) {
  return h("dl.details", {}, pairs.filter(Boolean).map(([term, value]) =>
    h("div.detail", {}, h("dt", {}, term), h("dd", {}, value ?? dash()))));
}

function budgetMeter(key) {
  if (key.budget_usd === null || key.budget_usd === undefined) return null;
  const used = (key.window_spend_usd || 0) + (key.reserved_usd || 0);
  const ratio = key.budget_usd > 0 ? Math.min(used / key.budget_usd, 1) : 1;
  const fill = h("span.meter-fill");
  fill.style.width = `${(ratio * 100).toFixed(1)}%`;
  if (ratio >= 1) fill.classList.add("full");
  else if (ratio >= 0.8) fill.classList.add("high");
  return h("div.budget", {},
    h("div.budget-head", {},
      h("span", {}, h("b", {}, usd(key.window_spend_usd || 0)), ` of ${usd(key.budget_usd)} this `,
        key.budget_window === "total" ? "budget (never resets)"
          : `${WINDOW_NAMES[key.budget_period] || "window"} (${key.budget_window})`),
      h("span.muted", {}, `${(ratio * 100).toFixed(ratio < 0.1 ? 1 : 0)}% used`)),
    h("span.meter.large", { role: "meter", "aria-valuemin": "0", "aria-valuemax": String(key.budget_usd),
      "aria-valuenow": String(used), "aria-label": "Budget used" }, fill));
}

function spendRows(key, report) {
  // a key that has spent nothing yet is not in the report at all
  const mine = (report.keys || []).find((row) => row.key_id === key.id) || null;
  return { mine, rows: (mine && mine.models) || [] };
}

function spendTable(rows) {
  const cols = ["Model (provider/model)", "Spend", "Requests", "Input tokens", "Output tokens",
    "Cache hits", "Estimated"];
  return h("table#key-spend-table.data", {},
    h("caption.sr-only", {}, "Spend by model"),
    h("thead", {}, h("tr", {}, cols.map((c, i) => h("th", { scope: "col", class: i ? "num" : null }, c)))),
    h("tbody", {}, rows.map((row) => h("tr", { data: { model: row.model } },
      h("td.mono", {}, row.model),
      h("td.num", {}, usd(row.spend_usd ?? 0)),
      h("td.num", {}, count(row.requests ?? 0)),
      h("td.num", {}, count(row.input_tokens ?? 0)),
      h("td.num", {}, count(row.output_tokens ?? 0)),
      h("td.num", {}, count(row.cache_hits ?? 0)),
      h("td.num", {}, count(row.estimated_requests ?? 0))))));
}

export function mountKey(ctx) {
  const id = ctx.params[0];
  ctx.tools.append(h("a.button.ghost", { href: "#/keys" }, "← All keys"));

  async function load() {
    ctx.loading();
    try {
      const [key, report] = await Promise.all([api.key(id, ctx.signal), api.spend(ctx.signal)]);
      if (ctx.left) return;
      ctx.setTitle(`Key: ${key.name}`);
      const [status, state] = keyStatus(key);
      const { mine, rows } = spendRows(key, report);
      const limits = (v) => (v ? count(v) : h("span.muted", {}, "no limit"));
      const detail = h("section#key-detail.panel", { "aria-label": "Key details" },
        budgetMeter(key),
        definitions([
          ["Name", key.name],
          ["ID", h("span.mono", {}, key.id)],
          ["Status", h("span", {}, pill(status, state), key.static ? h("span.tag", {}, "from config") : null)],
          ["Budget", key.budget_usd === null || key.budget_usd === undefined
            ? h("span.muted", {}, "no budget") : `${usd(key.budget_usd)} ${key.budget_period}`],
          ["Budget period", key.budget_period],
          key.budget_window ? ["Budget window", key.budget_window] : null,
          ["Spend (all time)", usd(key.spend_usd ?? 0)],
          ["Spend this window", usd(key.window_spend_usd ?? 0)],
          ["Reserved (in flight)", usd(key.reserved_usd ?? 0)],
          key.budget_left_usd !== undefined ? ["Budget left", usd(key.budget_left_usd)] : null,
          ["RPM", limits(key.rpm)],
          ["TPM", limits(key.tpm)],
          ["Models", key.models && key.models.length ? key.models.join(", ")
            : h("span.muted", {}, "every model")],
          ["Requests", mine ? count(mine.requests) : "0"],
          ["Tokens in / out", mine ? `${count(mine.input_tokens)} / ${count(mine.output_tokens)}` : "0 / 0"],
          ["Cache hits", mine ? `${count(mine.cache_hits)} (saved ${usd(mine.cache_saved_usd ?? 0)})` : "0"],
          ["Created", timeCell(key.created_at)],
          ["Expires", key.expires_at ? timeCell(key.expires_at) : h("span.muted", {}, "never")],
          key.metadata ? ["Metadata", h("code.mono", {}, JSON.stringify(key.metadata))] : null,
        ]));
      const spendPanel = h("section.panel", { "aria-labelledby": "spend-title" },
        h("div.panel-head", {}, h("h2#spend-title", {}, "Spend by model"),
          h("span.muted", {}, "this key")));
      const sorted = [...rows].sort((a, b) => (b.spend_usd || 0) - (a.spend_usd || 0));
      if (sorted.length) {
        const svg = s("svg", { class: "bars", focusable: "false" });
        spendPanel.append(h("figure.bar-figure", {}, svg,
          h("figcaption.sr-only", {}, "Spend by model")), tableWrap(spendTable(sorted), "Spend by model"));
        clear(ctx.content).append(detail, spendPanel);
        barChart(svg, { rows: sorted.map((r) => ({ label: r.model, value: r.spend_usd || 0 })),
          format: usd, label: "Spend by model" });
      } else {
        spendPanel.append(spendTable([]), h("p.empty-inline", {}, "No spend recorded yet: " +
          "requests made with this key show here once they are answered."));
        clear(ctx.content).append(detail, spendPanel);
      }
      ctx.ready();
    } catch (err) {
      if (!ctx.gone(err)) ctx.error(err, load);
    }
  }

  load();
}
