// The optimization history (as Optuna's plot_optimization_history): every evaluated candidate
// with a value of the chosen metric as a point, in evaluation order (or against seconds since
// the start), those breaking a constraint as red crosses, and the best feasible value so far
// as a step line. Hover names the metric with its unit.
import { $ } from "../dom.js";
import { C, PENDING, candidateUrl, directionOf, feasible, meta, statusOf, textOf } from "../state.js";
import { axisTitle, named, number } from "../units.js";
import { plotConfig } from "./plotly.js";
import { throttledChart } from "./throttle.js";

const ID = "history-chart";

const known = (t) => t !== null && t !== undefined;

// Finished rows in evaluation order: by seconds since the start (rows without a time first),
// then id.
export function evaluationOrder() {
  const rows = [];
  for (let r = 0; r < C.n; r++) if (!PENDING.has(statusOf(r))) rows.push(r);
  const t = (r) => (known(C.t[r]) ? C.t[r] : -Infinity);
  rows.sort((a, b) => t(a) - t(b) || C.id[a] - C.id[b]);
  return rows;
}

function draw() {
  if (!meta) return Promise.resolve();
  const m = $("hist-metric").value || meta.objectives[0].metric;
  const byTime = $("hist-x").value === "time";
  const logY = $("hist-log").checked;
  const col = C.metrics[m] || [];
  const maximize = directionOf(m) === "maximize";
  const good = { x: [], y: [], id: [], text: [] }, bad = { x: [], y: [], id: [], text: [] };
  const best = { x: [], y: [], text: [] };
  let bestV = null, failed = 0;
  const rows = evaluationOrder();
  rows.forEach((r, i) => {
    const x = byTime ? C.t[r] : i + 1;
    const v = col[r];
    if (statusOf(r) !== "ok") { failed += 1; return; }
    if (v === null || v === undefined || (logY && v <= 0) || !known(x)) return;
    const ok = feasible(r);
    const into = ok ? good : bad;
    into.x.push(x); into.y.push(v); into.id.push(C.id[r]);
    const when = known(C.t[r]) ? ` · ${number(C.t[r])} s since start` : "";
    into.text.push(`${named(m, v)}<br>evaluation ${i + 1}${when}<br>${textOf(r)}`);
    if (ok && (bestV === null || (maximize ? v > bestV : v < bestV))) {
      bestV = v;
      best.x.push(x); best.y.push(v); best.text.push(`best so far ${named(m, v)}<br>#${C.id[r]}`);
    }
  });
  if (best.x.length && rows.length) { // the line runs on to the latest evaluation
    const lastX = byTime ? C.t[rows[rows.length - 1]] : rows.length;
    if (known(lastX) && lastX > best.x[best.x.length - 1]) { best.x.push(lastX); best.y.push(bestV); best.text.push(`best so far ${named(m, bestV)}`); }
  }
  $("hist-count").textContent = `${good.x.length + bad.x.length} points of ${rows.length} evaluated (${failed} failed, not drawn)`;
  const hover = "%{text}<extra></extra>";
  const traces = [
    { type: "scattergl", mode: "markers", name: "meets the constraints", ...good, customdata: good.id, hovertemplate: hover,
      marker: { color: "#1f5fa8", size: 5, opacity: 0.6 } },
    { type: "scattergl", mode: "markers", name: "breaks a constraint", ...bad, customdata: bad.id, hovertemplate: hover,
      marker: { color: "#c0392b", size: 6, symbol: "x-thin-open", line: { width: 1, color: "#c0392b" } } },
    { type: "scatter", mode: "lines", name: `best ${m} so far`, x: best.x, y: best.y, text: best.text, hovertemplate: hover,
      line: { shape: "hv", color: "#e67e22", width: 2 } },
  ];
  for (const t of traces) delete t.id;
  const chart = $(ID);
  return Plotly.react(chart, traces, {
    margin: { t: 10, r: 10, b: 45, l: 70 }, hovermode: "closest", legend: { orientation: "h", y: -0.2 },
    xaxis: { title: { text: byTime ? "seconds since start (s)" : "evaluation (in order of finishing)" } },
    yaxis: { title: { text: axisTitle(m) }, type: logY ? "log" : "linear", exponentformat: "e" },
    uirevision: `${m}|${byTime}|${logY}`,
  }, plotConfig).then(() => { chart.dataset.points = String(good.x.length + bad.x.length); chart.dataset.metric = m; });
}

export const requestHistory = throttledChart(ID, draw);

export function initHistory() {
  for (const id of ["hist-metric", "hist-x", "hist-log"]) $(id).addEventListener("change", () => requestHistory(true));
  const chart = $(ID);
  Plotly.newPlot(chart, [], { margin: { t: 10, r: 10, b: 45, l: 70 } }, plotConfig).then(() => {
    chart.on("plotly_click", (ev) => {
      const p = ev.points && ev.points[0];
      if (p && p.customdata !== undefined) location.href = candidateUrl(Number(p.customdata));
    });
  });
}
