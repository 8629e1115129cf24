// Virtual keys (GET/POST/DELETE /ui/api/keys): search, create (the secret shown once),
// revoke with an in-place confirmation.

import { api } from "./api.js";
import { clear, count, dash, errorMessage, h, pill, tableWrap, timeCell, usd } from "./dom.js";

import { keyStatus } from "./page-key.js";

export { mountKey } from "./page-key.js";

// gateway/accounting/keys.py NewKey.budget_period; `none` is stored as `total`
const PERIODS = [
  ["total", "total (never resets)"],
  ["daily", "daily (UTC day)"],
  ["weekly", "weekly (ISO week)"],
  ["monthly", "monthly (UTC month)"],
  ["none", "none (same as total)"],
];

const NUMERIC = new Set(["Budget", "Spend", "RPM", "TPM"]);

function field(id, label, input, hint) {
  return h("div.field", {}, h("label", { for: id }, label), input,
    hint ? h("span.hint", { id: `${id}-hint` }, hint) : null);
}

function createForm(onCreated) {
  const name = h("input#key-name", { name: "name", required: true, maxlength: "200",
    autocomplete: "off", placeholder: "e.g. ci-pipeline" });
  const budget = h("input#key-budget", { name: "budget_usd", type: "number", min: "0",
    step: "0.01", inputmode: "decimal", placeholder: "no budget", "aria-describedby": "key-budget-hint" });
  const period = h("select#key-period", { name: "budget_period" },
    PERIODS.map(([value, label]) => h("option", { value }, label)));
  const rpm = h("input#key-rpm", { name: "rpm", type: "number", min: "1", step: "1",
    inputmode: "numeric", placeholder: "no limit" });
  const tpm = h("input#key-tpm", { name: "tpm", type: "number", min: "1", step: "1",
    inputmode: "numeric", placeholder: "no limit" });
  const models = h("input#key-models", { name: "models", autocomplete: "off",
    placeholder: "every model", "aria-describedby": "key-models-hint" });
  const submit = h("button#key-create-submit.button.primary", { type: "submit" }, "Create key");
  const problem = h("p#key-create-error.form-error", { role: "alert", hidden: true });
  const form = h("form#key-create.create-form", { novalidate: true, "aria-labelledby": "key-create-title" },
    h("h2#key-create-title", {}, "Create a virtual key"),
    h("div.fields", {},
      field("key-name", "Name", name),
      field("key-budget", "Budget (USD)", budget, "optional"),
      field("key-period", "Budget period", period),
      field("key-rpm", "Requests / min", rpm),
      field("key-tpm", "Tokens / min", tpm),
      field("key-models", "Allowed models", models, "comma-separated, optional")),
    h("div.form-actions", {}, submit), problem);
  const inputs = { name, budget_usd: budget, budget_period: period, rpm, tpm, models };

  function fail(message, param) {
    problem.textContent = message;
    problem.hidden = false;
    for (const [key, input] of Object.entries(inputs)) {
      if (key === param) input.setAttribute("aria-invalid", "true");
      else input.removeAttribute("aria-invalid");
    }
    (inputs[param] || name).focus();
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    problem.hidden = true;
    const spec = { name: name.value.trim(), budget_period: period.value };
    if (!spec.name) return fail("Give the key a name.", "name");
    for (const [key, input, parse] of [["budget_usd", budget, Number], ["rpm", rpm, Number],
      ["tpm", tpm, Number]]) {
      if (input.value.trim() === "") continue;
      const value = parse(input.value);
      if (!Number.isFinite(value) || value < 0 || (key !== "budget_usd" && !Number.isInteger(value))) {
        return fail(`${input.labels[0].textContent} must be ${key === "budget_usd"
          ? "a number of USD" : "a whole number"}.`, key);
      }
      spec[key] = value;
    }
    const names = models.value.split(",").map((m) => m.trim()).filter(Boolean);
    if (names.length) spec.models = names;
    submit.disabled = true;
    submit.textContent = "Creating…";
    try {
      const created = await api.createKey(spec);
      form.reset();
      for (const input of Object.values(inputs)) input.removeAttribute("aria-invalid");
      onCreated(created);
    } catch (err) {
      if (err.status !== 401) fail(errorMessage(err), err.param);
    } finally {
      submit.disabled = false;
      submit.textContent = "Create key";
    }
  });
  return form;
}

// The one time a secret is in the DOM: gone when Done is pressed or the page is left.
function secretPanel(created, slot) {
  const input = h("input#key-secret.mono", { readonly: true, value: created.key,
    "aria-describedby": "key-secret-note", spellcheck: "false", autocomplete: "off" });
  const copy = h("button#key-secret-copy.button", { type: "button" }, "Copy");
  const done = h("button#key-secret-done.button.primary", { type: "button" }, "Done");
  const said = h("span.copy-note", { role: "status" });
  const panel = h("section.secret-panel", { "aria-labelledby": "key-secret-title" },
    h("h2#key-secret-title", {}, `Key “${created.name}” created`),
    h("p#key-secret-note", {}, "Copy the secret now: it is shown this once and cannot be " +
      "recovered. Anyone holding it can call the gateway as this key."),
    h("label.sr-only", { for: "key-secret" }, "Secret"),
    h("div.secret-row", {}, input, copy, done), said);
  copy.addEventListener("click", async () => {
    input.focus();
    input.select();
    try {
      await navigator.clipboard.writeText(input.value);
      said.textContent = "Copied to the clipboard.";
    } catch {
      // no clipboard permission (or not a secure context): leave the text selected
      let copied = false;
      try {
        copied = document.execCommand("copy");
      } catch {
        copied = false;
      }
      said.textContent = copied ? "Copied to the clipboard." : "Selected: press Ctrl+C (⌘C) to copy.";
    }
  });
  done.addEventListener("click", () => {
    input.value = "";
    panel.remove();
    document.querySelector("#key-create-submit")?.focus();
  });
  clear(slot).append(panel);
  input.focus();
  input.select();
}

function keyRow(key, onRevoke) {
  const [status, state] = keyStatus(key);
  const actions = h("td.actions");
  const row = h("tr", { data: { keyId: key.id, search: `${key.name} ${key.id}`.toLowerCase() } },
    h("td", {}, h("a.key-link", { href: `#/keys/${encodeURIComponent(key.id)}` }, key.name)),
    h("td.mono", {}, key.id),
    h("td.num", {}, key.budget_usd === null || key.budget_usd === undefined ? dash() : usd(key.budget_usd)),
    h("td.num", {}, usd(key.spend_usd ?? 0)),
    h("td", {}, key.budget_usd === null || key.budget_usd === undefined
      ? h("span.muted", {}, key.budget_period || "total") : key.budget_period),
    h("td.num", {}, key.rpm ? count(key.rpm) : dash()),
    h("td.num", {}, key.tpm ? count(key.tpm) : dash()),
    h("td", {}, key.models && key.models.length ? key.models.join(", ") : h("span.muted", {}, "all")),
    h("td", {}, timeCell(key.created_at)),
    h("td", {}, pill(status, state), key.static ? h("span.tag", {}, "config") : null),
    actions);
  if (key.static) {
    actions.append(h("span.muted", { title: "A key from the config file: remove it there" },
      "in config"));
  } else if (!key.revoked) {
    const button = h("button.revoke.button.small.danger-ghost", { type: "button",
      data: { keyId: key.id }, "aria-label": `Revoke ${key.name}` }, "Revoke");
    button.addEventListener("click", () => onRevoke(key, actions, button));
    actions.append(button);
  }
  return row;
}

export function mountKeys(ctx) {
  const secretSlot = h("div.secret-slot");
  const notice = h("p.notice", { role: "status" });
  const search = h("input#key-search", { type: "search", placeholder: "Filter by name or id",
    autocomplete: "off", "aria-label": "Filter keys by name or id" });
  const noMatch = h("p.empty-inline", { hidden: true });
  const tableBox = h("div.keys-table-box");
  const listPanel = h("section.panel", { "aria-labelledby": "keys-title" },
    h("div.panel-head", {}, h("h2#keys-title", {}, "Keys"), search), notice, ctx.status,
    tableBox, noMatch);
  ctx.content.append(createForm(created), secretSlot, listPanel);
  let confirming = null; // the open confirmation's cancel, so only one is ever open

  function created(key) {
    secretPanel(key, secretSlot);
    notice.textContent = "";
    load(false);
  }

  function filter() {
    const wanted = search.value.trim().toLowerCase();
    let shown = 0;
    let total = 0;
    for (const row of tableBox.querySelectorAll("tbody tr")) {
      total += 1;
      row.hidden = wanted !== "" && !row.dataset.search.includes(wanted);
      if (!row.hidden) shown += 1;
    }
    noMatch.hidden = !(total && !shown);
    noMatch.textContent = `No key's name or id contains “${search.value.trim()}”: clear the filter.`;
  }
  search.addEventListener("input", filter);

  function revoke(key, cell, button) {
    if (confirming) confirming();
    const confirm = h("button#revoke-confirm.button.small.danger", { type: "button" }, "Revoke");
    const cancel = h("button#revoke-cancel.button.small", { type: "button" }, "Cancel");
    const box = h("span.confirm", { role: "group", "aria-label": `Confirm revoking ${key.name}` },
      h("span", {}, "Revoke for good?"), confirm, cancel);
    const close = () => {
      confirming = null;
      box.replaceWith(button);
    };
    confirming = close;
    button.replaceWith(box);
    cancel.addEventListener("click", () => {
      close();
      button.focus();
    });
    box.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        close();
        button.focus();
      }
    });
    confirm.addEventListener("click", async () => {
      confirm.disabled = true;
      cancel.disabled = true;
      confirm.textContent = "Revoking…";
      try {
        await api.revokeKey(key.id);
        confirming = null;
        notice.textContent = `Key “${key.name}” (${key.id}) is revoked: its next request gets 401.`;
        await load(false);
      } catch (err) {
        if (err.status === 401) return;
        close();
        notice.textContent = `Could not revoke “${key.name}”: ${errorMessage(err)}`;
        button.focus();
      }
    });
    cancel.focus();
  }

  async function load(first) {
    if (first) ctx.loading();
    try {
      const answer = await api.keys(ctx.signal);
      if (ctx.left) return;
      const keys = answer.data || [];
      confirming = null;
      if (!keys.length) {
        clear(tableBox);
        noMatch.hidden = true;
        ctx.empty("No virtual keys yet: create one above.");
        return;
      }
      const cols = ["Name", "ID", "Budget", "Spend", "Period", "RPM", "TPM", "Models", "Created",
        "Status", ""];
      const table = h("table#keys-table.data", {},
        h("caption.sr-only", {}, "Virtual keys"),
        h("thead", {}, h("tr", {}, cols.map((c) => h("th", { scope: "col",
          class: NUMERIC.has(c) ? "num" : null }, c || h("span.sr-only", {}, "Actions"))))),
        h("tbody", {}, keys.map((key) => keyRow(key, revoke))));
      clear(tableBox).append(tableWrap(table, "Virtual keys"));
      filter();
      ctx.ready();
    } catch (err) {
      if (!ctx.gone(err)) ctx.error(err, () => load(true));
    }
  }

  load(true);
}
