// The best-candidates table (or, with no feasible candidate, the closest by total violation)
// and the comparison tray its check boxes and the frontier's shift-clicks fill.
import { D } from "./derived.js";
import { $, el } from "./dom.js";
import { fmt } from "./format.js";
import { C, TOP, candidateUrl, cfg, meta, metric, paramsText, primary, statusOf } from "./state.js";

export const compareSet = new Set();

export function toggleCompare(id, on) {
  if (on) compareSet.add(id); else compareSet.delete(id);
  const tray = $("compare-tray");
  tray.replaceChildren(...[...compareSet].map((c) => el("span", { class: "chip" }, el("a", { href: candidateUrl(c) }, `#${c}`),
    el("button", { type: "button", class: "link", title: "remove", onclick: () => { toggleCompare(c, false); renderTop(); } }, "×"))));
  $("compare-go").disabled = compareSet.size < 2;
}

export function initCompare() {
  $("compare-go").addEventListener("click", () => { location.href = `${cfg.compareUrl}?ids=${[...compareSet].join(",")}`; });
}

function closestRows() { // no feasible candidate: the ok rows of least total violation (violation.js)
  const ranked = [];
  for (let r = 0; r < C.n; r++) if (statusOf(r) === "ok") ranked.push([window.totalViolation(meta.constraints, (k) => metric(k, r)), r]);
  ranked.sort((a, b) => a[0] - b[0] || C.id[a[1]] - C.id[b[1]]);
  return ranked.slice(0, TOP);
}

export function renderTop() {
  const m = primary().metric;
  const others = meta.objectives.slice(1).map((o) => o.metric);
  const tp = cfg.throughput || { metric: "gbps", unit: "GB/s" }; // GFLOP/s for compute-bound workloads
  const { okCount, bestLatency } = D;
  const closest = !D.top.length && okCount && meta.constraints.length ? closestRows() : null;
  const notice = $("no-feasible");
  notice.hidden = !closest;
  if (closest) notice.textContent = `No feasible candidate: none of the ${okCount} ok candidates meets the constraints (` +
    meta.constraints.map((c) => `${c.metric} ${c.op} ${c.value}`).join("; ") + "). The table lists the closest, by total violation.";
  const violations = new Map((closest || []).map(([v, r]) => [r, v]));
  const rows = closest ? closest.map(([, r]) => r) : D.top;
  const head = $("best-table").tHead.rows[0];
  const showTp = tp.metric in C.metrics; // a recorded landscape has no throughput
  head.replaceChildren(...["", "#", "Gen", "Agent", "Parameters", m, ...others, ...(showTp ? [tp.unit] : []),
    ...(closest ? ["Violation"] : ["Tie"])].map((h) => el("th", {}, h)));
  // Ties are read on the latency against the target's noise floor; a goal of another primary
  // objective (a recorded score) marks its best row only.
  const byLatency = m === "latency_ms";
  const floor = byLatency && meta.ties && meta.ties.noise_floor ? meta.ties.noise_floor.floor : null;
  const tieNote = $("tie-note");
  if (tieNote) tieNote.hidden = !byLatency;
  if (tieNote && floor !== null) {
    tieNote.textContent = `Tied with best: latency_ms within the noise floor of this target (${(100 * floor).toFixed(1)}%, ` +
      `${meta.ties.noise_floor.source === "stored" ? "measured on its worker" : "default: none measured yet"}) of the best` +
      (bestLatency !== null ? ` (${fmt(bestLatency)} ms)` : "") + ": the difference cannot be told apart there.";
  }
  const tied = (r) => { const v = metric("latency_ms", r); return floor !== null && bestLatency !== null && typeof v === "number" && v <= bestLatency * (1 + floor); };
  $("best-table").tBodies[0].replaceChildren(...rows.map((r, i) => {
    const id = C.id[r];
    const box = el("input", { type: "checkbox", title: "compare", "data-id": id });
    box.checked = compareSet.has(id);
    box.addEventListener("change", () => toggleCompare(id, box.checked));
    return el("tr", {}, el("td", {}, box), el("td", {}, el("a", { href: candidateUrl(id) }, `#${id}`)),
      el("td", {}, C.gen[r]), el("td", {}, C.agents[C.agent[r]]), el("td", {}, el("code", {}, paramsText(r))),
      el("td", { class: "num" }, fmt(metric(m, r))), ...others.map((o) => el("td", { class: "num" }, fmt(metric(o, r)))),
      ...(showTp ? [el("td", { class: "num", "data-metric": tp.metric }, fmt(metric(tp.metric, r)))] : []),
      closest ? el("td", { class: "num" }, fmt(violations.get(r)))
        : el("td", { class: "tie" }, (byLatency ? bestLatency !== null && metric("latency_ms", r) === bestLatency : i === 0) ? "best"
          : tied(r) ? "tied with best" : ""));
  }));
}
