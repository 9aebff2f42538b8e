// Parameter importance as a bar chart: the newest importance insight of the run's workload and
// target (Optuna's PED-ANOVA, swarm/learning/insights.py), one bar per parameter, largest first.
import { $ } from "../dom.js";
import { meta } from "../state.js";
import { plotConfig } from "./plotly.js";

// The newest importance insight's {param: share} as [[param, share]], one entry per
// parameter, largest first; [] when there is none.
export function importanceEntries(insights) {
  const imp = (insights || []).find((i) => i.kind === "importance"); // newest first (events.js, learning.py)
  const shares = new Map();
  for (const [k, v] of Object.entries((imp && imp.data && imp.data.importances) || {})) if (typeof v === "number" && isFinite(v)) shares.set(k, v);
  return { insight: imp || null, entries: [...shares].sort((a, b) => b[1] - a[1]) };
}

export function drawImportance() {
  if (!meta) return null;
  const { insight, entries } = importanceEntries(meta.insights);
  const note = $("importance-note");
  const chart = $("importance-chart");
  if (!insight) {
    note.textContent = "No parameter importance yet: it is learned once enough candidates meet the constraints.";
    chart.hidden = true;
    return null;
  }
  const d = insight.data || {};
  note.textContent = `Share of the variation of ${d.objective || "the objective"} explained by each parameter (${d.method || "PED-ANOVA"}, from ${d.n ?? "?"} candidates meeting the constraints).`;
  chart.hidden = false;
  const rev = entries.slice().reverse(); // largest at the top
  return Plotly.react(chart, [{
    type: "bar", orientation: "h", x: rev.map(([, v]) => 100 * v), y: rev.map(([k]) => k),
    text: rev.map(([, v]) => `${(100 * v).toFixed(1)}%`), textposition: "auto", marker: { color: "#1f5fa8" },
    hovertemplate: "%{y}: %{x:.1f}% of the variation<extra></extra>",
  }], {
    margin: { t: 10, r: 20, b: 45, l: 110 }, height: Math.max(160, 40 + 28 * entries.length),
    xaxis: { title: { text: `importance for ${d.objective || "the objective"} (%)` }, rangemode: "tozero" },
    yaxis: { automargin: true },
  }, plotConfig).then(() => { chart.dataset.bars = String(entries.length); });
}
