// The config in force (GET /ui/api/config), secrets already masked by the server.

import { api } from "./api.js";
import { clear, dash, h, pill, timeCell } from "./dom.js";

function lastReload(last) {
  if (!last) return h("span.muted", {}, "none since start");
  const ok = last.result === "ok" || last.result === "applied" || last.result === "success";
  const parts = [pill(last.result || "unknown", ok ? "healthy" : "error"), " ", timeCell(last.at)];
  if (last.trigger) parts.push(h("span.muted", {}, ` · ${last.trigger}`));
  if (last.sha256) parts.push(h("div.mono.small", {}, `sha256 ${last.sha256}`));
  if (last.problems && last.problems.length) {
    parts.push(h("ul.problems", {}, last.problems.map((p) =>
      h("li", {}, typeof p === "string" ? p : JSON.stringify(p)))));
  }
  return parts;
}

export function mountConfig(ctx) {
  async function load() {
    ctx.loading();
    try {
      const answer = await api.config(ctx.signal);
      if (ctx.left) return;
      const pre = h("pre#config-json.config-json", { tabindex: "0", "aria-label": "The config in force, as JSON" },
        JSON.stringify(answer.config, null, 2));
      const copy = h("button#config-copy.button.small", { type: "button" }, "Copy JSON");
      const note = h("span.copy-note", { role: "status" });
      copy.addEventListener("click", async () => {
        try {
          await navigator.clipboard.writeText(pre.textContent);
          note.textContent = "Copied.";
        } catch {
          const range = document.createRange();
          range.selectNodeContents(pre);
          const selection = window.getSelection();
          selection.removeAllRanges();
          selection.addRange(range);
          note.textContent = "Selected: press Ctrl+C (⌘C) to copy.";
        }
      });
      const facts = h("dl.details", {},
        h("div.detail", {}, h("dt", {}, "File"),
          h("dd#config-path.mono", {}, answer.path || "built-in default (no file)")),
        h("div.detail", {}, h("dt", {}, "sha256"),
          h("dd#config-sha256.mono.break", {}, answer.sha256 || "none (built-in default)")),
        h("div.detail", {}, h("dt", {}, "Loaded"), h("dd#config-loaded-at", {}, timeCell(answer.loaded_at))),
        h("div.detail", {}, h("dt", {}, "Last reload"), h("dd#config-last-reload", {}, lastReload(answer.last_reload))),
        h("div.detail", {}, h("dt", {}, "Answered by"), h("dd", {}, answer.pid ? `pid ${answer.pid}` : dash())));
      clear(ctx.content).append(
        h("section.panel", { "aria-label": "Where the config came from" }, facts),
        h("section.panel", { "aria-labelledby": "config-json-title" },
          h("div.panel-head", {}, h("h2#config-json-title", {}, "Config in force"),
            h("span.actions-inline", {}, note, copy)),
          h("p.hint", {}, "Secrets (provider keys, the master key, static keys, URL passwords) show as ***."),
          pre));
      ctx.ready();
    } catch (err) {
      if (!ctx.gone(err)) ctx.error(err, load);
    }
  }

  load();
}
