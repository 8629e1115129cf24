// Overview: the last hour of the gateway's own counters (GET /ui/api/overview), one chart
// per metric, re-fetched every 10 s and redrawn in place.

import { api } from "./api.js";
import { lineChart } from "./charts.js";
import { count, h, localTime, percent, s, seconds, usd, compact } from "./dom.js";

const REFRESH_MS = 10000;

const rate = (v) => (v === null || v === undefined ? "–" : `${compact(v)}/s`);
const perHour = (v) => (v === null || v === undefined ? "–" : `${usd(v)}/h`);
const whole = (v) => (v === null || v === undefined ? "–" : count(Math.round(v)));

const METRICS = [
  { metric: "rps", title: "Requests per second", unit: "inference requests (/v1/…)",
    series: [["rps", "req/s"]], format: rate },
  { metric: "error_ratio", title: "Error ratio", unit: "answered 4xx or 5xx",
    series: [["error_ratio", "errors"]], format: percent, yMax: 1 },
  { metric: "latency", title: "Latency", unit: "request duration",
    series: [["p50_s", "p50"], ["p95_s", "p95"]], format: seconds },
  { metric: "ttft", title: "Time to first token", unit: "streams and non-streams",
    series: [["ttft_p50_s", "p50"], ["ttft_p95_s", "p95"]], format: seconds },
  { metric: "cost", title: "Cost per hour", unit: "USD, at the interval's rate",
    series: [["cost_per_hour_usd", "cost"]], format: perHour },
  { metric: "streams", title: "Active streams", unit: "at the sample",
    series: [["active_streams", "streams"]], format: whole, integer: true },
];

export function mountOverview(ctx) {
  const updated = h("span.updated", { "aria-live": "off" });
  const totals = h("div.totals");
  ctx.tools.append(totals, updated);
  let grid = null;
  const parts = {};
  let busy = false;

  function build() {
    grid = h("div.chart-grid");
    for (const def of METRICS) {
      const svg = s("svg", { class: "chart", data: { metric: def.metric }, focusable: "false" });
      const stat = h(def.series.length > 1 ? "div.stat.pair" : "div.stat", { data: { metric: def.metric } });
      const legend = h("ul.legend", { "aria-hidden": "true" },
        def.series.map(([, label], i) => h("li", {}, h(`span.swatch.series-${i}`), label)));
      const caption = h("figcaption", {},
        h("div.fig-head", {}, h("span.fig-title", {}, def.title), legend),
        h("span.fig-unit", {}, def.unit), stat);
      grid.append(h("figure.chart-card", {}, caption, h("div.chart-box", {}, svg)));
      parts[def.metric] = { svg, stat, def };
    }
    ctx.content.append(grid);
  }

  function draw(report) {
    const points = report.points;
    const interval = report.interval_s || 10;
    const last = points[points.length - 1];
    const first = points[0];
    const t1 = last.t;
    // the samples' own span (a young process has minutes, not the hour), at least a minute
    const t0 = Math.max(Math.min(first.t - interval, t1 - 60), t1 - (report.window_s || 3600));
    for (const { svg, stat, def } of Object.values(parts)) {
      const series = def.series.map(([field, label]) => ({
        label, points: points.map((p) => [p.t, p[field] ?? null]),
      }));
      lineChart(svg, { series, format: def.format, t0, t1, yMax: def.yMax, label: def.title,
        integer: def.integer });
      stat.replaceChildren(...def.series.map(([field, label], i) => {
        // an idle interval has no latency: show the last one measured, and when
        const seen = [...points].reverse().find((p) => p[field] !== null && p[field] !== undefined);
        return h("span.stat-value", {},
          def.series.length > 1 ? h(`span.stat-label.series-${i}`, {}, label) : null,
          seen ? def.format(seen[field]) : h("span.stat-none", {}, "no requests yet"),
          seen && seen !== last ? h("span.stat-when", {}, `at ${localTime(seen.t, false)}`) : null);
      }));
    }
  }

  function showTotals(report) {
    const t = report.totals || {};
    totals.replaceChildren(
      h("span", {}, h("b", {}, count(t.requests ?? 0)), " requests"),
      h("span", {}, h("b", {}, count(t.errors ?? 0)), " errors"),
      h("span", {}, h("b", {}, usd(t.cost_usd ?? 0)), " spent"),
    );
    totals.title = "Totals since this gateway process started";
  }

  async function load(first) {
    if (busy) return;
    busy = true;
    if (first) ctx.loading();
    try {
      const report = await api.overview(ctx.signal);
      if (ctx.left) return;
      showTotals(report);
      updated.textContent = `Updated ${localTime(Date.now() / 1000, false)}`;
      if (!report.points || !report.points.length) {
        if (grid) grid.hidden = true;
        ctx.empty(`Collecting: the first sample comes within ${Math.ceil(report.interval_s || 10)} s`,
          h("p.hint", {}, "Each point covers one sampling interval of inference traffic (/v1/…). " +
            "Send some requests through the gateway to see them here."));
        return;
      }
      if (!grid) build();
      grid.hidden = false;
      ctx.ready(); // before drawing: the charts measure their laid-out width
      draw(report);
    } catch (err) {
      if (!ctx.gone(err)) ctx.error(err, () => load(!grid));
    } finally {
      busy = false;
    }
  }

  load(true);
  ctx.every(REFRESH_MS, () => load(false));
}
