// The convergence chart: the best feasible primary objective so far, against evaluations and
// against seconds since the start.
import { D } from "../derived.js";
import { C, axes, clock, primary, running } from "../state.js";
import { plotConfig } from "./plotly.js";

export function drawConvergence() {
  const m = primary().metric;
  const conv = D.conv;
  const ext = (xs, ys, last) => (xs.length ? { x: xs.concat([last]), y: ys.concat([ys[ys.length - 1]]) } : { x: [], y: [] });
  const a = ext(conv.evals, conv.bestE, conv.count);
  const lastT = C.n ? Math.max(conv.times.length ? conv.times[conv.times.length - 1] : 0, (running() ? (Date.now() - clock.startedMs) / 1000 : 0)) : 0;
  const b = ext(conv.times, conv.bestT, lastT);
  const logY = axes.logY && m === axes.y;
  return Plotly.react("convergence-chart", [
    { type: "scatter", mode: "lines+markers", name: "vs evaluations", x: a.x, y: a.y, line: { shape: "hv", color: "#1f5fa8" }, marker: { size: 5 } },
    { type: "scatter", mode: "lines+markers", name: "vs time (s)", x: b.x, y: b.y, xaxis: "x2", yaxis: "y2", line: { shape: "hv", color: "#1e8449" }, marker: { size: 5 } },
  ], {
    margin: { t: 10, r: 10, b: 40, l: 60 }, showlegend: false,
    grid: { rows: 2, columns: 1, pattern: "independent", roworder: "top to bottom" },
    xaxis: { title: { text: "evaluations" } }, yaxis: { title: { text: `best ${m}` }, type: logY ? "log" : "linear" },
    xaxis2: { title: { text: "seconds since start" } }, yaxis2: { title: { text: `best ${m}` }, type: logY ? "log" : "linear" },
    uirevision: "conv",
  }, plotConfig);
}
