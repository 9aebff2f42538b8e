// Any metric or parameter on either axis, points coloured by a parameter (as KTdashboard):
// every ok candidate with both values. Hover names each axis and the colour with its unit.
import { $, el } from "../dom.js";
import { C, candidateUrl, cfg, labelTicks, meta, statusOf, textOf } from "../state.js";
import { axisTitle, named } from "../units.js";
import { plotConfig } from "./plotly.js";
import { throttledChart } from "./throttle.js";

const ID = "scatter-chart";
const LOG_BY_DEFAULT = ["latency_ms", "max_rel_error", "max_abs_error"];

// "m:latency_ms" or "p:BLOCK" -> its column and name, and a labelled parameter's ticks.
function column(choice) {
  const [kind, name] = [choice.slice(0, 1), choice.slice(2)];
  return { name, values: (kind === "p" ? C.params : C.metrics)[name] || [], ticks: kind === "p" ? labelTicks(name) : null };
}

// Colour values: numbers as they are; other values (categorical parameters) as their index
// among the distinct values, with the values as the colour bar's ticks.
function colours(values, rows) {
  const numeric = rows.every((r) => values[r] === null || values[r] === undefined || typeof values[r] === "number");
  if (numeric) return { color: rows.map((r) => values[r]), ticks: null };
  const distinct = [...new Set(rows.map((r) => String(values[r])))].sort();
  return { color: rows.map((r) => distinct.indexOf(String(values[r]))), ticks: distinct };
}

function draw() {
  if (!meta) return Promise.resolve();
  const xs = column($("sc-x").value), ys = column($("sc-y").value), cs = column($("sc-color").value);
  const logX = $("sc-logx").checked, logY = $("sc-logy").checked;
  const rows = [];
  const usable = (v, log) => v !== null && v !== undefined && (!log || v > 0);
  for (let r = 0; r < C.n; r++) if (statusOf(r) === "ok" && usable(xs.values[r], logX) && usable(ys.values[r], logY)) rows.push(r);
  const { color, ticks } = colours(cs.values, rows);
  const text = rows.map((r) => `${named(xs.name, xs.values[r])}<br>${named(ys.name, ys.values[r])}<br>${named(cs.name, cs.values[r])}`
    + `<br>${textOf(r)}`);
  $("sc-count").textContent = String(rows.length);
  const chart = $(ID);
  const colorbar = { title: { text: axisTitle(cs.name) } };
  if (ticks) Object.assign(colorbar, { tickvals: ticks.map((_, i) => i), ticktext: ticks });
  else if (cs.ticks) Object.assign(colorbar, cs.ticks);
  return Plotly.react(chart, [{
    type: "scattergl", mode: "markers", x: rows.map((r) => xs.values[r]), y: rows.map((r) => ys.values[r]),
    customdata: rows.map((r) => C.id[r]), text, hovertemplate: "%{text}<extra></extra>",
    marker: { color, colorscale: "Viridis", showscale: true, colorbar, size: 7, opacity: 0.8 },
  }], {
    margin: { t: 10, r: 10, b: 50, l: 70 }, hovermode: "closest",
    xaxis: { title: { text: axisTitle(xs.name) }, type: logX ? "log" : "linear", exponentformat: "e", ...xs.ticks },
    yaxis: { title: { text: axisTitle(ys.name) }, type: logY ? "log" : "linear", exponentformat: "e", ...ys.ticks },
    uirevision: `${$("sc-x").value}|${$("sc-y").value}|${logX}|${logY}`,
  }, plotConfig).then(() => { chart.dataset.points = String(rows.length); });
}

export const requestScatter = throttledChart(ID, draw);

// The parameter most important for the objective (the newest importance insight), else the first.
function topParam(params) {
  const imp = (meta.insights || []).find((i) => i.kind === "importance");
  const ranked = Object.entries((imp && imp.data && imp.data.importances) || {}).sort((a, b) => b[1] - a[1]).map(([k]) => k);
  return ranked.find((k) => params.includes(k)) || params[0];
}

// The choices follow the snapshot's columns; choices already made are kept.
export function setupScatter() {
  const metrics = Object.keys(C.metrics), params = Object.keys(C.params);
  const options = () => [
    el("optgroup", { label: "metrics" }, ...metrics.map((n) => el("option", { value: `m:${n}` }, axisTitle(n)))),
    el("optgroup", { label: "parameters" }, ...params.map((n) => el("option", { value: `p:${n}` }, n))),
  ];
  const primary = meta.objectives[0].metric;
  const tp = (cfg.throughput || {}).metric;
  const throughput = metrics.includes(tp) ? tp : primary;
  const first = topParam(params);
  const defaults = {
    "sc-x": first ? `p:${first}` : `m:${primary}`,
    "sc-y": `m:${throughput}`,
    "sc-color": params.length > 1 ? `p:${params.find((p) => p !== first)}` : `m:${primary}`,
  };
  for (const id of ["sc-x", "sc-y", "sc-color"]) {
    const sel = $(id), was = sel.value;
    sel.replaceChildren(...options());
    sel.value = was && [...sel.options].some((o) => o.value === was) ? was : defaults[id];
  }
  $("sc-logx").checked = LOG_BY_DEFAULT.includes($("sc-x").value.slice(2));
  $("sc-logy").checked = LOG_BY_DEFAULT.includes($("sc-y").value.slice(2));
}

export function initScatter() {
  for (const id of ["sc-x", "sc-y", "sc-color", "sc-logx", "sc-logy"]) {
    $(id).addEventListener("change", (ev) => {
      if (id === "sc-x" || id === "sc-y") $(id === "sc-x" ? "sc-logx" : "sc-logy").checked = LOG_BY_DEFAULT.includes(ev.target.value.slice(2));
      requestScatter(true);
    });
  }
  const chart = $(ID);
  Plotly.newPlot(chart, [], { margin: { t: 10, r: 10, b: 50, l: 70 } }, plotConfig).then(() => {
    chart.on("plotly_click", (ev) => {
      const p = ev.points && ev.points[0];
      if (p && p.customdata !== undefined) location.href = candidateUrl(Number(p.customdata));
    });
  });
}
