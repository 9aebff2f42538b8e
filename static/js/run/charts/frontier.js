// The Pareto frontier chart: ok candidates binned to screen cells (bins.js), those breaking a
// constraint as red crosses, the frontier of the chosen axes as a line. Zoom and pan re-bin;
// click opens a candidate, shift-click adds it to the comparison.
import { bins, makeGrid } from "../bins.js";
import { compareSet, renderTop, toggleCompare } from "../best.js";
import { D } from "../derived.js";
import { $ } from "../dom.js";
import { schedule } from "../scheduler.js";
import { C, axes, candidateUrl, dirty, textOf } from "../state.js";
import { axisTitle, unitOf } from "../units.js";
import { plotConfig } from "./plotly.js";

const MARGIN = { t: 10, r: 10, b: 45, l: 60 };
const LEGEND_PX = 25; // the horizontal legend below the plot takes about one row
let revision = 0;

// The plot area in pixels: the chart's box less the margins this module lays out.
function plotSize() {
  const chart = $("frontier-chart");
  const w = chart.clientWidth - MARGIN.l - MARGIN.r;
  const h = chart.clientHeight - MARGIN.t - MARGIN.b - LEGEND_PX;
  return [Math.max(200, w), h > 0 ? h : 400];
}

function cellTraces(map) {
  const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
  const x = [], y = [], id = [], text = [];
  for (const { r, n } of map.values()) {
    x.push(xs[r]); y.push(ys[r]); id.push(C.id[r]);
    text.push(n > 1 ? `${textOf(r)}<br>(the best of several candidates here: zoom in for the others)` : textOf(r));
  }
  return { x, y, id, text };
}

// Redraws when a cell or the frontier changed; returns Plotly's promise, or null.
export function drawFrontier() {
  $("n-points").textContent = String(D.okCount);
  $("n-feasible").textContent = String(D.feasRows.length);
  $("n-front").textContent = String(D.front.length);
  let grid = bins.grid;
  if (grid && !grid.outside && !grid.changed && !D.frontChanged) return null; // new points hidden under drawn ones
  if (!grid || grid.outside) grid = makeGrid(D.feasRows, D.badRows, plotSize());
  grid.changed = false;
  D.frontChanged = false;
  const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
  const fr = D.front.slice().sort((a, b) => xs[a] - xs[b]);
  const { logX, logY } = axes;
  const good = cellTraces(grid.feas), bad = cellTraces(grid.bad);
  const unit = (name) => { const u = unitOf(name); return !u ? "" : u === "%" || u === "×" ? u : ` ${u}`; };
  const xy = `%{text}<br>${axes.x}: %{x:.4~g}${unit(axes.x)}<br>${axes.y}: %{y:.4~g}${unit(axes.y)}`;
  revision += 1;
  const traces = [
    { type: "scattergl", mode: "markers", name: "feasible", x: good.x, y: good.y, customdata: good.id, text: good.text,
      hovertemplate: `${xy}<extra></extra>`, marker: { color: "#8aa1b9", size: 6 } },
    { type: "scattergl", mode: "markers", name: "breaks a constraint", x: bad.x, y: bad.y, customdata: bad.id, text: bad.text,
      hovertemplate: `${xy}<extra>breaks a constraint</extra>`,
      marker: { color: "#c0392b", size: 7, symbol: "x-thin-open", line: { width: 1, color: "#c0392b" } } },
    { type: "scattergl", mode: "lines+markers", name: "Pareto frontier", x: fr.map((r) => xs[r]),
      y: fr.map((r) => ys[r]), customdata: fr.map((r) => C.id[r]), text: fr.map(textOf),
      hovertemplate: `${xy}<extra>frontier</extra>`, line: { shape: "hv", color: "#e67e22" },
      marker: { color: "#e67e22", size: 10, line: { color: "#000", width: 1 } } },
  ];
  const layout = {
    margin: MARGIN, datarevision: revision, uirevision: `${axes.x}|${axes.y}|${logX}|${logY}`,
    xaxis: { title: { text: axisTitle(axes.x) }, type: logX ? "log" : "linear" },
    yaxis: { title: { text: axisTitle(axes.y) }, type: logY ? "log" : "linear" },
    legend: { orientation: "h", y: -0.18 }, hovermode: "closest",
  };
  $("n-shown").textContent = String(grid.feas.size + grid.bad.size);
  return Plotly.react("frontier-chart", traces, layout, plotConfig);
}

// An axis range after a zoom or pan, in axis units (log10 on log axes): from the
// plotly_relayout event, else from the chart's layout, where Plotly keeps the ranges it shows.
function rangeOf(ev, chart, axis) {
  if (Array.isArray(ev[`${axis}.range`])) return ev[`${axis}.range`].slice();
  if (`${axis}.range[0]` in ev && `${axis}.range[1]` in ev) return [ev[`${axis}.range[0]`], ev[`${axis}.range[1]`]];
  const range = chart.layout[axis] && chart.layout[axis].range;
  return range ? range.slice() : null;
}

// Empty WebGL traces at once, so that WebGL and its shaders start while the snapshot is on its way.
export function initFrontier() {
  const chart = $("frontier-chart");
  // One invisible point each: Plotly creates the WebGL contexts and compiles the shaders only
  // for a trace with data (most of a second under software WebGL), so this happens while the
  // server builds the snapshot, not after it has arrived.
  const empty = (name) => ({ type: "scattergl", mode: "markers", name, x: [0], y: [0], hoverinfo: "skip",
                             marker: { opacity: 0 } });
  return Plotly.newPlot(chart, [empty("feasible"), empty("breaks a constraint"), empty("Pareto frontier")],
    { margin: MARGIN, legend: { orientation: "h", y: -0.18 } }, plotConfig).then(() => {
    chart.on("plotly_relayout", (ev) => { // zoom or pan: re-bin at the new scale
      if (ev["xaxis.autorange"] || ev["yaxis.autorange"] || ev.autosize) bins.view = null;
      else if (Object.keys(ev).some((k) => k.startsWith("xaxis.range") || k.startsWith("yaxis.range"))) {
        const x = rangeOf(ev, chart, "xaxis"), y = rangeOf(ev, chart, "yaxis");
        if (!x || !y) return;
        bins.view = { x, y };
      } else return;
      bins.grid = null; dirty.points = true; schedule();
    });
    chart.on("plotly_click", (ev) => {
      const p = ev.points && ev.points[0];
      if (!p || p.customdata === undefined) return;
      const id = Number(p.customdata);
      const e = ev.event || {};
      if (e.shiftKey || e.ctrlKey || e.metaKey) { toggleCompare(id, !compareSet.has(id)); renderTop(); } else location.href = candidateUrl(id);
    });
  });
}
