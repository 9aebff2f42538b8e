// The agents table: evaluations, improvements, credit, budget share, UCB score and boost.
import { $, el } from "./dom.js";
import { fmt } from "./format.js";
import { meta } from "./state.js";

export function renderAgents() {
  const total = meta.agents.reduce((s, a) => s + (a.share || 0), 0) || 1;
  $("agents-table").tBodies[0].replaceChildren(...meta.agents.slice().sort((a, b) => b.credit - a.credit || b.improvements - a.improvements).map((a) =>
    el("tr", { class: a.paused ? "muted" : "" },
      el("td", {}, el("code", {}, a.name), a.paused ? " (paused)" : ""), el("td", {}, a.kind),
      el("td", { class: "num" }, a.evaluations), el("td", { class: "num" }, a.improvements),
      el("td", { class: "num" }, fmt(a.credit)),
      el("td", {}, el("span", { class: "sharebar", style: `width:${Math.round(100 * (a.share || 0) / total)}%` }), ` ${a.share || 0}`),
      el("td", { class: "num" }, fmt(a.score)), el("td", { class: "num" }, fmt(a.boost)))));
}
