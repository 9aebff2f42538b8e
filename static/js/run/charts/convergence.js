// The convergence chart: the best feasible primary objective so far, against evaluations and
// against seconds since the start. Both lines run on past the last improvement: to the latest
// evaluation, and to now while the run runs (to its end once it has ended).
import { D } from "../derived.js";
import { C, axes, clock, primary, running } from "../state.js";
import { axisTitle } from "../units.js";
import { plotConfig } from "./plotly.js";

// Seconds since the start that the time line reaches: now while running, else the run's end.
export function timeAxisEnd() {
  const lastImprovement = D.conv.times.length ? D.conv.times[D.conv.times.length - 1] : 0;
  const end = running() ? Date.now() : clock.endedMs;
  return Math.max(lastImprovement, end === null ? 0 : (end - clock.startedMs) / 1000);
}

export function drawConvergence() {
  const m = primary().metric;
  const conv = D.conv;
  const ext = (xs, ys, last) => (xs.length ? { x: xs.concat([last]), y: ys.concat([ys[ys.length - 1]]) } : { x: [], y: [] });
  const a = ext(conv.evals, conv.bestE, conv.count);
  const b = ext(conv.times, conv.bestT, C.n ? timeAxisEnd() : 0);
  // the extension is no improvement: no marker at its end
  const sizes = (n) => (n ? Array.from({ length: n }, (_, i) => (i === n - 1 ? 0 : 5)) : 5);
  const logY = axes.logY && m === axes.y;
  return Plotly.react("convergence-chart", [
    { type: "scatter", mode: "lines+markers", name: "vs evaluations", x: a.x, y: a.y, line: { shape: "hv", color: "#1f5fa8" }, marker: { size: sizes(a.x.length) } },
    { type: "scatter", mode: "lines+markers", name: "vs time (s)", x: b.x, y: b.y, xaxis: "x2", yaxis: "y2", line: { shape: "hv", color: "#1e8449" }, marker: { size: sizes(b.x.length) } },
  ], {
    margin: { t: 10, r: 10, b: 40, l: 60 }, showlegend: false,
    grid: { rows: 2, columns: 1, pattern: "independent", roworder: "top to bottom" },
    xaxis: { title: { text: "evaluations" } }, yaxis: { title: { text: `best ${axisTitle(m)}` }, type: logY ? "log" : "linear" },
    xaxis2: { title: { text: "seconds since start" } }, yaxis2: { title: { text: `best ${axisTitle(m)}` }, type: logY ? "log" : "linear" },
    uirevision: "conv",
  }, plotConfig);
}
