// The status bar: state, generation, evaluated / budget, counts per status, why the run ended;
// the stop button and the steering controls only while the run runs.
import { $ } from "./dom.js";
import { C, PENDING, cfg, meta } from "./state.js";

export function renderState() {
  const s = meta.run;
  $("run-state").textContent = s.state;
  $("run-state").className = `badge state-${s.state}`;
  const stop = $("stop-form");
  if (stop && s.state !== "running") stop.remove();
  $("run-end").hidden = !s.end_reason; // why the run ended: budget, wall time, exhausted space, who stopped it, what failed
  $("run-end-kind").textContent = s.end_kind || "";
  $("run-end-reason").textContent = s.end_reason || "";
  $("run-generation").textContent = s.generation;
  const counts = {};
  for (let r = 0; r < C.n; r++) { const st = C.statuses[C.status[r]]; counts[st] = (counts[st] || 0) + 1; }
  const done = Object.entries(counts).filter(([k]) => !PENDING.has(k)).reduce((a, [, n]) => a + n, 0);
  $("run-evaluated").textContent = String(done);
  $("run-progress").value = done;
  $("run-progress").max = s.budget;
  $("run-counts").textContent = Object.entries(counts).map(([k, n]) => `${k}: ${n}`).join(" · ");
  document.querySelectorAll(".needs-running").forEach((e) => { e.hidden = s.state !== "running" || !cfg.canSteer; });
}
