// Insights learned for the run's workload and target: parameter importance, failure rules
// (with a suggested restriction to accept while the run runs), best configurations.
import { accept } from "./directions.js";
import { $, el } from "./dom.js";
import { fmt } from "./format.js";
import { cfg, meta, paramText } from "./state.js";

export function renderInsights() {
  const list = $("insights");
  // one importance (the newest; the chart shows it per parameter), every other insight
  const firstImportance = meta.insights.findIndex((i) => i.kind === "importance");
  const shown = meta.insights.filter((i, k) => i.kind !== "importance" || k === firstImportance);
  const items = shown.map((i) => {
    const d = i.data || {};
    let body;
    if (i.kind === "importance") {
      const entries = Object.entries(d.importances || {}).sort((a, b) => b[1] - a[1]);
      body = el("div", {}, `parameter importance for ${d.objective || "the objective"} (${d.method || ""}, n=${d.n || "?"}): `,
        ...entries.map(([k, v]) => el("span", { class: "imp" }, el("code", {}, k), ` ${(100 * v).toFixed(0)}%`)));
    } else if (i.kind === "failure_rule") {
      body = el("div", {}, "failure rule: ", el("code", {}, d.rule || ""), ` → ${d.status || "failure"}`,
        d.support !== undefined ? ` (support ${d.support}, precision ${fmt(d.precision)})` : "");
      if (d.restriction) {
        const btn = el("button", { type: "button", class: "small needs-running", "data-insight": i.id }, "Accept restriction");
        btn.hidden = meta.run.state !== "running" || !cfg.canSteer;
        btn.addEventListener("click", () => accept(i.id, btn));
        body.append(el("div", {}, "suggested restriction ", el("code", {}, d.restriction), " ", btn));
      }
    } else if (i.kind === "best_config") {
      body = el("div", {}, `best on ${d.shape || "?"}: `, el("code", {}, Object.entries(d.params || {}).map(([k, v]) => paramText(k, v)).join(" ")),
        ` ${fmt(d.latency_ms)} ms`);
    } else body = el("div", {}, JSON.stringify(d));
    return el("li", { class: `insight insight-${i.kind}` }, el("span", { class: "badge" }, i.kind), " ", body);
  });
  list.replaceChildren(...(items.length ? items : [el("li", { class: "hint" }, "No insights yet: they come after the first generations.")]));
}
