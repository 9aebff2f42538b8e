// Parallel coordinates over parameters, coloured by the chosen objective. WebGL parcoords is
// the slowest chart to draw (seconds under software rendering, whatever the number of lines),
// so it is drawn only while visible, after the other panels; it follows live events (at most
// every PC_MIN_GAP ms, or 5x its own draw time) only while one draw takes under PC_LIVE_MAX ms,
// and for runs of more than PC_AUTO_MAX candidates it waits for the engineer's click.
import { $ } from "../dom.js";
import { timings } from "../scheduler.js";
import { C, directionOf, meta, primary, statusOf } from "../state.js";
import { plotConfig } from "./plotly.js";

const PC_MIN_GAP = 3000, PC_LIVE_MAX = 300, PC_AUTO_MAX = 5000;
const pc = { visible: false, stale: true, drawnAt: 0, cost: 0, timer: null, allowed: false };

// The data changed (force: draw now, the engineer asked).
export function requestParcoords(force) {
  pc.stale = true;
  if (force) pc.allowed = true;
  const auto = C.n <= PC_AUTO_MAX && (pc.drawnAt === 0 || pc.cost < PC_LIVE_MAX);
  const button = $("pc-draw");
  if (!pc.allowed && !auto) {
    button.hidden = false;
    button.textContent = pc.drawnAt ? "Redraw with the latest candidates" : "Draw the parallel coordinates";
    return;
  }
  pc.allowed = false;
  button.hidden = true;
  if (!pc.visible || pc.timer) return;
  const wait = force ? 0 : Math.max(0, pc.drawnAt + Math.max(PC_MIN_GAP, 5 * pc.cost) - Date.now());
  pc.timer = setTimeout(() => {
    pc.timer = null;
    (window.requestIdleCallback || ((f) => setTimeout(f, 0)))(() => drawParcoords(), { timeout: 1000 });
  }, wait);
}

function drawParcoords() {
  if (!meta || !pc.visible) return Promise.resolve();
  const t0 = performance.now();
  pc.stale = false;
  const colorBy = $("pc-color").value || primary().metric;
  const rows = [];
  const col = C.metrics[colorBy];
  for (let r = 0; r < C.n; r++) if (statusOf(r) === "ok" && col && col[r] !== null) rows.push(r);
  const names = Object.keys(C.params);
  const dims = names.map((name) => {
    const vals = C.params[name];
    const domain = ((meta.space.parameters || []).find((p) => p.name === name) || {}).values;
    const ticks = domain && domain.length <= 12 ? domain : undefined;
    return { label: name, values: rows.map((r) => vals[r]), tickvals: ticks };
  });
  dims.push({ label: colorBy, values: rows.map((r) => col[r]) });
  const color = rows.map((r) => col[r]);
  $("pc-count").textContent = String(rows.length);
  const done = Plotly.react("parcoords-chart", [{
    type: "parcoords", dimensions: dims,
    line: { color, colorscale: "Viridis", reversescale: directionOf(colorBy) === "minimize", showscale: true, colorbar: { title: { text: colorBy } } },
  }], { margin: { t: 40, r: 60, b: 20, l: 60 } }, plotConfig);
  pc.drawnAt = Date.now();
  pc.cost = performance.now() - t0;
  timings.parts.parcoords = pc.cost;
  timings.parcoordsAt = performance.now();
  timings.parcoordsDraws += 1;
  return done;
}

// Draws while the chart is in view (or about to be), and on the engineer's request.
export function initParcoords() {
  new IntersectionObserver((entries) => {
    pc.visible = entries.some((e) => e.isIntersecting);
    if (pc.visible && pc.stale) requestParcoords(pc.allowed);
  }, { rootMargin: "200px" }).observe($("parcoords-chart"));
  $("pc-draw").addEventListener("click", () => requestParcoords(true));
  $("pc-color").addEventListener("change", () => requestParcoords(true));
}
