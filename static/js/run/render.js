// One redraw of whatever the events since the last one changed (state.js dirty flags): the
// derived data first, then the charts and panels; the log lines queued meanwhile last.
import { renderAgents } from "./agents.js";
import { renderTop } from "./best.js";
import { drawConvergence } from "./charts/convergence.js";
import { drawFrontier } from "./charts/frontier.js";
import { requestParcoords } from "./charts/parcoords.js";
import { drawShares } from "./charts/shares.js";
import { rebuild, update } from "./derived.js";
import { renderDirections } from "./directions.js";
import { renderInsights } from "./insights.js";
import { renderRunning } from "./running.js";
import { flushLog } from "./log.js";
import { drawWhenVisible } from "./offscreen.js";
import { timed, timings } from "./scheduler.js";
import { dirty, meta } from "./state.js";
import { renderState } from "./status.js";
import { redrawWorkbench } from "./workbench.js";

// Returns false before the snapshot (nothing drawn), else after the charts have drawn.
export async function redraw() {
  if (!meta) return false;
  const t0 = performance.now();
  const jobs = [];
  if (dirty.full) { rebuild(); dirty.full = false; dirty.points = true; }
  else if (dirty.points) update();
  if (dirty.points) {
    jobs.push(timed("frontier", drawFrontier), timed("convergence", drawConvergence));
    requestParcoords();
    renderTop();
    dirty.state = true;
  }
  else if (dirty.clock) jobs.push(timed("convergence", drawConvergence)); // time passed: the line reaches now
  if (dirty.state) renderState();
  if (dirty.agents) { renderAgents(); jobs.push(drawWhenVisible("shares-chart", () => timed("shares", drawShares))); }
  if (dirty.insights) renderInsights();
  if (dirty.directions) renderDirections();
  const workbench = redrawWorkbench(dirty);
  if (workbench) jobs.push(workbench);
  if (dirty.running || dirty.state) renderRunning();
  for (const k in dirty) dirty[k] = false;
  flushLog();
  await Promise.all(jobs);
  timings.lastRedrawMs = performance.now() - t0;
  timings.redraws += 1;
  if (timings.firstDrawAt === null) { timings.firstDrawAt = performance.now(); document.body.dataset.drawn = "1"; }
  return true;
}
