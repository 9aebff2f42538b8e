// Parallel coordinates over parameters, coloured by the chosen objective. WebGL parcoords is
// the slowest chart to draw (seconds under software rendering, whatever the number of lines),
// so it is drawn only while visible, after the other panels, and it follows live candidates
// throttled: one draw at most every PC_MIN_GAP ms, and at most every PC_COST_GAP times the
// time a draw takes (the shorter of the last two: a one-off slow draw, as WebGL sets up, does
// not hold the chart back).
import { $ } from "../dom.js";
import { timings } from "../scheduler.js";
import { C, directionOf, labelTicks, meta, primary, statusOf } from "../state.js";
import { plotConfig } from "./plotly.js";

const PC_MIN_GAP = 1000, PC_COST_GAP = 3;
// pending: a draw is due (timer set, or waiting for an idle moment); token: the latest one asked
const pc = { visible: false, stale: true, drawnAt: 0, costs: [0, 0], pending: false, timer: null, token: 0 };
const idle = window.requestIdleCallback || ((f) => setTimeout(f, 0));

// The data changed (now: draw at once, e.g. another colour was chosen).
export function requestParcoords(now) {
  pc.stale = true;
  if (!pc.visible || (pc.pending && !now)) return; // the draw already due includes this change
  clearTimeout(pc.timer);
  const token = ++pc.token;
  const gap = Math.max(PC_MIN_GAP, PC_COST_GAP * Math.min(...pc.costs));
  pc.pending = true;
  pc.timer = setTimeout(() => idle(() => {
    if (token !== pc.token) return; // superseded by a later request
    pc.pending = false;
    drawParcoords();
  }, { timeout: 1000 }), now ? 0 : Math.max(0, pc.drawnAt + gap - Date.now()));
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
    const ticks = labelTicks(name) || { tickvals: domain && domain.length <= 12 ? domain : undefined };
    return { label: name, values: rows.map((r) => vals[r]), ...ticks };
  });
  dims.push({ label: colorBy, values: rows.map((r) => col[r]) });
  const color = rows.map((r) => col[r]);
  $("pc-count").textContent = String(rows.length);
  const done = Plotly.react("parcoords-chart", [{
    type: "parcoords", dimensions: dims,
    line: { color, colorscale: "Viridis", reversescale: directionOf(colorBy) === "minimize", showscale: true, colorbar: { title: { text: colorBy } } },
  }], { margin: { t: 40, r: 60, b: 20, l: 60 } }, plotConfig);
  pc.drawnAt = Date.now();
  const cost = performance.now() - t0;
  pc.costs = [pc.costs[1], cost];
  timings.parts.parcoords = cost;
  timings.parcoordsAt = performance.now();
  timings.parcoordsDraws += 1;
  return done;
}

// Draws while the chart is in view (or about to be).
export function initParcoords() {
  new IntersectionObserver((entries) => {
    pc.visible = entries.some((e) => e.isIntersecting);
    if (pc.visible && pc.stale) requestParcoords();
  }, { rootMargin: "200px" }).observe($("parcoords-chart"));
  $("pc-color").addEventListener("change", () => requestParcoords(true));
}
