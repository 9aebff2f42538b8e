// The frontier chart's axis controls: a metric and a log switch for each axis; the choices come
// from the snapshot's metrics, the defaults from the objectives. A change rebuilds the chart.
import { bins } from "./bins.js";
import { $, el } from "./dom.js";
import { schedule } from "./scheduler.js";
import { C, axes, dirty, meta, primary } from "./state.js";

const LOG_BY_DEFAULT = ["latency_ms", "max_rel_error", "max_abs_error"];

export function setupAxes() {
  const names = Object.keys(C.metrics);
  const [o1, o2] = meta.objectives;
  axes.x = axes.x && names.includes(axes.x) ? axes.x : o1.metric;
  axes.y = axes.y && names.includes(axes.y) ? axes.y : (o2 ? o2.metric : names.find((n) => n !== o1.metric) || o1.metric);
  for (const [sel, val] of [[$("x-axis"), axes.x], [$("y-axis"), axes.y], [$("pc-color"), primary().metric]]) {
    sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    sel.value = val;
  }
  $("x-log").checked = axes.logX = LOG_BY_DEFAULT.includes(axes.x);
  $("y-log").checked = axes.logY = LOG_BY_DEFAULT.includes(axes.y);
}

export function initAxes() {
  for (const id of ["x-axis", "y-axis", "x-log", "y-log"]) {
    $(id).addEventListener("change", () => {
      axes.x = $("x-axis").value; axes.y = $("y-axis").value;
      axes.logX = $("x-log").checked; axes.logY = $("y-log").checked;
      bins.view = null; dirty.full = true; schedule();
    });
  }
}
