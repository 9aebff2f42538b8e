// The agents table: evaluations, improvements, credit, budget share, UCB score and boost.
// Until an agent has evaluations its figures are a dash titled "no data yet", and so is the
// score of an untried agent (UCB's infinite score, sent as 1e9).
import { $, el } from "./dom.js";
import { fmt } from "./format.js";
import { meta } from "./state.js";

export const NO_DATA = "no data yet";
const UNTRIED_SCORE = 1e9; // swarm/learning/credit.py: an arm never pulled

const noData = () => el("td", { class: "num muted no-data", title: NO_DATA }, "–");
const num = (text) => el("td", { class: "num" }, text);
const realScore = (s) => typeof s === "number" && isFinite(s) && s < UNTRIED_SCORE;

export function renderAgents() {
  const total = meta.agents.reduce((s, a) => s + (a.share || 0), 0) || 1;
  $("agents-table").tBodies[0].replaceChildren(...meta.agents.slice().sort((a, b) => b.credit - a.credit || b.improvements - a.improvements).map((a) => {
    const tried = a.evaluations > 0;
    return el("tr", { class: a.paused ? "muted" : "" },
      el("td", {}, el("code", {}, a.name), a.paused ? " (paused)" : ""), el("td", {}, a.kind),
      tried ? num(a.evaluations) : noData(), tried ? num(a.improvements) : noData(), tried ? num(fmt(a.credit)) : noData(),
      el("td", {}, el("span", { class: "sharebar", style: `width:${Math.round(100 * (a.share || 0) / total)}%` }), ` ${a.share || 0}`),
      tried && realScore(a.score) ? num(fmt(a.score)) : noData(), num(fmt(a.boost)));
  }));
}
