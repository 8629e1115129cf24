// DOM building and formatting shared by every page. API text only ever reaches the DOM
// through textContent (via h's children or `text`), never as markup.

const SVG_NS = "http://www.w3.org/2000/svg";

// h("td.state", {data: {state: "x"}}, "text", child): a tiny hyperscript. Attributes go
// through setAttribute, except `style` which is refused: the CSP blocks inline styles.
export function h(spec, attrs, ...children) {
  const tag = /^[a-z0-9]*/i.exec(spec)[0];
  const el = document.createElement(tag || "div");
  const classes = [];
  for (const [, mark, word] of spec.slice(tag.length).matchAll(/([.#])([^.#]+)/g)) {
    if (mark === "#") el.id = word;
    else classes.push(word);
  }
  if (classes.length) el.className = classes.join(" ");
  apply(el, attrs);
  append(el, children);
  return el;
}

export function s(name, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, name);
  apply(el, attrs);
  append(el, children);
  return el;
}

function apply(el, attrs) {
  if (!attrs) return;
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "style") throw new Error("inline styles are blocked by the CSP: use a class");
    if (key === "data") {
      for (const [k, v] of Object.entries(value)) {
        if (v !== undefined && v !== null) el.dataset[k] = String(v);
      }
    } else if (key === "on") {
      for (const [event, fn] of Object.entries(value)) el.addEventListener(event, fn);
    } else if (key === "text") {
      el.textContent = String(value);
    } else if (key === "class") {
      el.setAttribute("class", value);
    } else if (key === "value" && "value" in el) {
      el.value = value;
    } else {
      el.setAttribute(key, value === true ? "" : String(value));
    }
  }
}

function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function clear(el) {
  while (el.firstChild) el.firstChild.remove();
  return el;
}

// Tables scroll sideways inside this wrapper at narrow widths instead of breaking the layout.
export function tableWrap(table, label) {
  return h("div.table-wrap", { role: "region", "aria-label": label, tabindex: "0" }, table);
}

export function pill(text, state) {
  return h("span.pill", { data: { state: state || text } }, text);
}

export function dash() {
  return h("span.muted", { "aria-label": "none" }, "–");
}

// --- numbers -------------------------------------------------------------------------

export function usd(value) {
  if (value === null || value === undefined || Number.isNaN(value)) return "–";
  const abs = Math.abs(value);
  // cents hide what a request costs, so small amounts keep four significant digits
  let digits = 2;
  if (abs > 0 && abs < 0.01) digits = Math.min(9, 2 - Math.floor(Math.log10(abs)) + 2);
  else if (abs > 0 && abs < 1) digits = 4;
  return "$" + value.toLocaleString("en-US", {
    minimumFractionDigits: abs === 0 ? 2 : Math.min(digits, 2),
    maximumFractionDigits: digits,
  });
}

export function count(value) {
  if (value === null || value === undefined) return "–";
  return Number(value).toLocaleString("en-US");
}

export function compact(value) {
  if (value === null || value === undefined) return "–";
  const abs = Math.abs(value);
  if (abs >= 1e9) return trim(value / 1e9) + "G";
  if (abs >= 1e6) return trim(value / 1e6) + "M";
  if (abs >= 1e3) return trim(value / 1e3) + "k";
  return trim(value);
}

function trim(value) {
  const abs = Math.abs(value);
  const digits = abs >= 100 ? 0 : abs >= 10 ? 1 : abs >= 0.01 ? 2 : 4;
  return String(Number(value.toFixed(digits)));
}

export function seconds(value) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "0";
  if (Math.abs(value) < 1) return trim(value * 1000) + " ms";
  return trim(value) + " s";
}

export function percent(value) {
  if (value === null || value === undefined) return "–";
  const p = value * 100;
  return (p === 0 ? "0" : p < 0.1 ? "<0.1" : trim(p)) + "%";
}

// --- times (the API gives unix seconds or RFC 3339; shown in the browser's zone) -------

export function toDate(value) {
  if (value === null || value === undefined || value === "") return null;
  const d = typeof value === "number" ? new Date(value * 1000) : new Date(value);
  return Number.isNaN(d.getTime()) ? null : d;
}

const pad = (n) => String(n).padStart(2, "0");

export function localTime(value, withDate = true) {
  const d = toDate(value);
  if (!d) return "–";
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (!withDate) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

export function relative(value, now = Date.now()) {
  const d = toDate(value);
  if (!d) return "";
  const diff = (d.getTime() - now) / 1000;
  const abs = Math.abs(diff);
  let text;
  if (abs < 1) return "now";
  if (abs < 60) text = `${Math.round(abs)} s`;
  else if (abs < 3600) text = `${Math.round(abs / 60)} min`;
  else if (abs < 86400 * 2) text = `${Math.round(abs / 3600)} h`;
  else text = `${Math.round(abs / 86400)} d`;
  return diff > 0 ? `in ${text}` : `${text} ago`;
}

// A <time> showing local time, with the relative form beside it and UTC on hover.
export function timeCell(value, withDate = true) {
  const d = toDate(value);
  if (!d) return dash();
  return h("time", { datetime: d.toISOString(), title: d.toISOString() },
    localTime(value, withDate), " ", h("span.rel", {}, relative(value)));
}

export function errorMessage(err) {
  if (!err) return "Something went wrong";
  return err.message || String(err);
}
