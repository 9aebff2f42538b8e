// The run page's exploration charts: the optimization history, any metric or parameter on
// either axis, and parameter importance (charts/opthistory.js, scatter.js, importance.js).
// They are fed from the columns like the other charts; redraw() calls redrawWorkbench() with
// what changed.
import { drawImportance } from "./charts/importance.js";
import { initHistory, requestHistory } from "./charts/opthistory.js";
import { initScatter, requestScatter, setupScatter } from "./charts/scatter.js";
import { $, el } from "./dom.js";
import { C, meta } from "./state.js";
import { axisTitle } from "./units.js";

const LOG_BY_DEFAULT = ["latency_ms", "max_rel_error", "max_abs_error"];
let setFor = null; // the snapshot's meta the choices were made for

function setupHistory() {
  const sel = $("hist-metric"), was = sel.value;
  const names = Object.keys(C.metrics);
  sel.replaceChildren(...names.map((n) => el("option", { value: n }, axisTitle(n))));
  sel.value = was && names.includes(was) ? was : meta.objectives[0].metric;
  $("hist-log").checked = LOG_BY_DEFAULT.includes(sel.value);
}

export function initWorkbench() {
  initHistory();
  initScatter();
  $("hist-metric").addEventListener("change", () => { $("hist-log").checked = LOG_BY_DEFAULT.includes($("hist-metric").value); });
}

// Returns a promise when a chart was drawn at once (importance), else null.
export function redrawWorkbench(dirty) {
  if (!meta) return null;
  if (setFor !== meta) { setFor = meta; setupHistory(); setupScatter(); }
  if (dirty.points) { requestHistory(); requestScatter(); }
  return dirty.insights ? drawImportance() : null;
}
