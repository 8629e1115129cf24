// Hand-drawn SVG charts: a time-series line chart and a horizontal bar chart. They draw at
// the element's real pixel size (text is never stretched) and redraw when it is resized.

import { clear, localTime, s } from "./dom.js";

const drawn = new WeakMap(); // svg -> its last options, for redrawing on resize
const resizer = typeof ResizeObserver === "function"
  ? new ResizeObserver((entries) => {
    for (const entry of entries) {
      const last = drawn.get(entry.target);
      if (last && Math.abs(last.width - entry.contentRect.width) > 1) last.draw();
    }
  })
  : null;

// `width`: the width the drawing used, so a first draw made before layout (a fallback
// width) is redone once the element has its real size
function observe(svg, width, draw) {
  if (!drawn.has(svg) && resizer) resizer.observe(svg);
  drawn.set(svg, { width, draw });
}

// Round tick values for [0, max]: 1, 2 or 5 times a power of ten.
export function niceTicks(max, wanted = 4) {
  if (!(max > 0)) return [0, 1];
  const raw = max / wanted;
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = [1, 2, 2.5, 5, 10].map((m) => m * power).find((st) => st >= raw) || raw;
  const ticks = [];
  for (let v = 0; v <= max + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  if (ticks[ticks.length - 1] < max) ticks.push(Number((ticks.length * step).toPrecision(12)));
  return ticks;
}

const TIME_STEPS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];

function timeTicks(t0, t1, maxTicks) {
  const span = Math.max(t1 - t0, 1);
  const step = TIME_STEPS.find((st) => span / st <= maxTicks) || 3600 * 6;
  const offset = new Date().getTimezoneOffset() * 60; // ticks on local round minutes
  const ticks = [];
  for (let t = Math.ceil((t0 - offset) / step) * step + offset; t <= t1; t += step) ticks.push(t);
  return { ticks, step };
}

// series: [{label, points: [[t, value|null], ...]}]; format: value -> text.
export function lineChart(svg, options) {
  const draw = () => observe(svg, drawLines(svg, options), draw);
  draw();
}

function drawLines(svg, { series, format, t0, t1, yMax, label, integer }) {
  const measured = svg.getBoundingClientRect().width || 0;
  const width = Math.max(measured, 240);
  const height = Math.max(svg.getBoundingClientRect().height || 0, 140);
  const m = { top: 12, right: 14, bottom: 24, left: 56 };
  const w = width - m.left - m.right;
  const hgt = height - m.top - m.bottom;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
  clear(svg);

  let max = 0;
  for (const one of series) for (const [, v] of one.points) if (v !== null && v > max) max = v;
  if (yMax !== undefined) max = Math.min(Math.max(max, 0), yMax);
  let ticks = niceTicks(max || (yMax !== undefined ? yMax / 10 : 1));
  if (integer && ticks[1] < 1) ticks = niceTicks(Math.max(Math.ceil(max), 1), Math.max(Math.ceil(max), 1));
  const top = ticks[ticks.length - 1];
  const x = (t) => m.left + ((t - t0) / Math.max(t1 - t0, 1e-9)) * w;
  const y = (v) => m.top + hgt - (Math.min(v, top) / top) * hgt;

  const grid = s("g", { class: "grid" });
  for (const tick of ticks) {
    grid.append(s("line", { x1: m.left, x2: m.left + w, y1: y(tick), y2: y(tick) }));
    grid.append(s("text", { x: m.left - 8, y: y(tick), class: "tick y", "dy": "0.32em" },
      format(tick)));
  }
  const { ticks: times, step } = timeTicks(t0, t1, Math.max(2, Math.floor(w / 90)));
  const half = step < 60 ? 26 : 16; // half a label's width: one cut by the edge is dropped
  for (const t of times) {
    grid.append(s("line", { class: "x", x1: x(t), x2: x(t), y1: m.top + hgt, y2: m.top + hgt + 4 }));
    if (x(t) + half > width || x(t) - half < 0) continue;
    grid.append(s("text", { x: x(t), y: m.top + hgt + 17, class: "tick x" },
      localTime(t, false).slice(0, step < 60 ? 8 : 5)));
  }
  grid.append(s("line", { class: "axis", x1: m.left, x2: m.left + w, y1: m.top + hgt, y2: m.top + hgt }));
  svg.append(grid);

  series.forEach((one, i) => {
    const group = s("g", { class: `series series-${i}` });
    let path = "";
    let area = "";
    let run = [];
    const flush = () => {
      if (run.length === 1) {
        group.append(s("circle", { cx: run[0][0], cy: run[0][1], r: 2.5, class: "dot" }));
      } else if (run.length > 1) {
        const d = run.map(([px, py], j) => `${j ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
        path += d;
        area += `${d}L${run[run.length - 1][0].toFixed(1)},${y(0)}L${run[0][0].toFixed(1)},${y(0)}Z`;
      }
      run = [];
    };
    for (const [t, v] of one.points) {
      if (v === null || v === undefined) flush();
      else run.push([x(t), y(v)]);
    }
    flush();
    if (i === 0 && area) group.append(s("path", { d: area, class: "area" }));
    if (path) group.append(s("path", { d: path, class: "line" }));
    svg.append(group);
  });

  const latest = series.map((one) => {
    const last = [...one.points].reverse().find(([, v]) => v !== null && v !== undefined);
    return `${one.label} ${last ? format(last[1]) : "none"}`;
  });
  svg.setAttribute("aria-label", `${label}: ${latest.join(", ")}`);
  hover(svg, { series, format, x, y, m, w, hgt });
  return measured;
}

// A crosshair and a tooltip for the nearest sample under the pointer.
function hover(svg, { series, format, x, m, w, hgt, y }) {
  const times = series[0] ? series[0].points.map(([t]) => t) : [];
  if (!times.length) return;
  const layer = s("g", { class: "hover", visibility: "hidden" });
  const rule = s("line", { y1: m.top, y2: m.top + hgt });
  const dots = series.map((_, i) => s("circle", { r: 3.5, class: `hover-dot series-${i}` }));
  const box = s("rect", { rx: 4, height: 18 + 16 * series.length });
  const lines = [s("text", { class: "tip-time" }),
    ...series.map((_, i) => s("text", { class: `tip series-${i}` }))];
  layer.append(rule, ...dots, box, ...lines);
  const catcher = s("rect", { x: m.left, y: m.top, width: w, height: hgt, class: "catcher" });
  svg.append(layer, catcher);

  catcher.addEventListener("pointerleave", () => layer.setAttribute("visibility", "hidden"));
  catcher.addEventListener("pointermove", (event) => {
    const rect = svg.getBoundingClientRect();
    const px = event.clientX - rect.left;
    let best = 0;
    for (let i = 1; i < times.length; i++) {
      if (Math.abs(x(times[i]) - px) < Math.abs(x(times[best]) - px)) best = i;
    }
    const cx = x(times[best]);
    rule.setAttribute("x1", cx);
    rule.setAttribute("x2", cx);
    lines[0].textContent = localTime(times[best], false);
    let widest = lines[0].textContent.length;
    series.forEach((one, i) => {
      const v = one.points[best] ? one.points[best][1] : null;
      const text = `${one.label}: ${v === null || v === undefined ? "no requests" : format(v)}`;
      lines[i + 1].textContent = text;
      widest = Math.max(widest, text.length);
      if (v === null || v === undefined) dots[i].setAttribute("visibility", "hidden");
      else {
        dots[i].setAttribute("visibility", "visible");
        dots[i].setAttribute("cx", cx);
        dots[i].setAttribute("cy", y(v));
      }
    });
    const boxWidth = widest * 6.6 + 16;
    const bx = cx + 10 + boxWidth > m.left + w ? cx - 10 - boxWidth : cx + 10;
    box.setAttribute("x", bx);
    box.setAttribute("y", m.top);
    box.setAttribute("width", boxWidth);
    lines.forEach((line, i) => {
      line.setAttribute("x", bx + 8);
      line.setAttribute("y", m.top + 14 + 16 * i);
    });
    layer.setAttribute("visibility", "visible");
  });
}

// rows: [{label, value}]; horizontal bars sorted by the caller, labels on the left.
export function barChart(svg, options) {
  const draw = () => observe(svg, drawBars(svg, options), draw);
  draw();
}

function drawBars(svg, { rows, format, label }) {
  const measured = svg.getBoundingClientRect().width || 0;
  const width = Math.max(measured, 240);
  const bar = 18;
  const gap = 10;
  const labelWidth = Math.min(220, width * 0.4);
  const valueWidth = 80;
  const height = Math.max(rows.length, 1) * (bar + gap) + gap;
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", height);
  svg.setAttribute("role", "img");
  svg.setAttribute("aria-label", `${label}: ` + rows.map((r) => `${r.label} ${format(r.value)}`).join(", "));
  clear(svg);
  const max = Math.max(...rows.map((r) => r.value), 0) || 1;
  const room = width - labelWidth - valueWidth - 16;
  rows.forEach((row, i) => {
    const top = gap + i * (bar + gap);
    const name = row.label.length > 34 ? row.label.slice(0, 33) + "…" : row.label;
    svg.append(
      s("text", { x: labelWidth, y: top + bar / 2, dy: "0.32em", class: "bar-label" }, name,
        s("title", {}, row.label)),
      s("rect", { x: labelWidth + 8, y: top, height: bar, rx: 3, class: "bar-track", width: room }),
      s("rect", {
        x: labelWidth + 8, y: top, height: bar, rx: 3, class: "bar",
        width: Math.max((row.value / max) * room, row.value > 0 ? 2 : 0),
      }),
      s("text", { x: labelWidth + 16 + room, y: top + bar / 2, dy: "0.32em", class: "bar-value" },
        format(row.value)),
    );
  });
  return measured;
}
