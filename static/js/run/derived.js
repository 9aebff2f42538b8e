// What the charts and tables show, kept up to date incrementally from the columns: the ok rows
// that meet / break the constraints, the 2-D Pareto frontier of the chosen axes, the best TOP
// rows, the best-so-far convergence and the best latency (the reference of "tied with best").
import { bins, place } from "./bins.js";
import { C, PENDING, TOP, axes, feasible, fresh, metric, primary, sgn, statusOf } from "./state.js";

export const D = {
  front: [], // rows on the frontier of the current axes (feasible ok)
  frontChanged: true,
  top: [], // best TOP rows by the primary objective (feasible ok)
  // improvements of the best feasible primary objective: at evaluation count / at seconds since the start
  conv: { evals: [], times: [], bestE: [], bestT: [], best: null, count: 0 },
  bestLatency: null, // lowest latency_ms of a feasible ok candidate
  feasRows: [], badRows: [], // ok rows with both axis metrics, meeting / breaking the constraints
  okCount: 0,
};

function pointsOf(rows) {
  const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
  const out = [];
  if (!xs || !ys) return out;
  const sx = sgn(axes.x), sy = sgn(axes.y);
  for (const r of rows) {
    const x = xs[r], y = ys[r];
    if (x === null || y === null || x === undefined || y === undefined) continue;
    out.push({ r, sx: sx * x, sy: sy * y });
  }
  return out;
}
function frontierOf(points) { // 2-D Pareto by sort and sweep, both oriented to minimisation
  points.sort((a, b) => a.sx - b.sx || a.sy - b.sy);
  const out = [];
  let bestY = Infinity;
  for (const p of points) if (p.sy < bestY) { out.push(p); bestY = p.sy; }
  return out;
}
function addTop(rows) {
  const m = primary().metric, s = sgn(m), col = C.metrics[m];
  if (!col) return;
  const top = D.top;
  for (const r of rows) {
    const v = col[r];
    if (v === null || v === undefined) continue;
    if (top.length >= TOP && s * v >= s * col[top[top.length - 1]]) continue;
    top.push(r);
    top.sort((a, b) => s * col[a] - s * col[b]);
    if (top.length > TOP) top.pop();
  }
}
function addConvergence(rows) {
  const m = primary().metric, s = sgn(m), col = C.metrics[m];
  const conv = D.conv;
  for (const r of rows) {
    conv.count += 1;
    if (statusOf(r) !== "ok" || !feasible(r)) continue;
    const lat = metric("latency_ms", r);
    if (typeof lat === "number" && (D.bestLatency === null || lat < D.bestLatency)) D.bestLatency = lat;
    if (!col || col[r] === null) continue;
    const v = col[r];
    if (conv.best === null || s * v < s * conv.best) {
      conv.best = v;
      conv.evals.push(conv.count); conv.bestE.push(v);
      conv.times.push(C.t[r] || 0); conv.bestT.push(v);
    }
  }
}
function addPoints(rows) { // returns the feasible ones
  const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
  const feas = [];
  const grid = bins.grid;
  for (const r of rows) {
    D.okCount += 1;
    if (!xs || !ys || xs[r] === null || ys[r] === null || xs[r] === undefined || ys[r] === undefined) continue;
    if (feasible(r)) { D.feasRows.push(r); feas.push(r); if (grid) place(grid.feas, r); } else { D.badRows.push(r); if (grid) place(grid.bad, r); }
  }
  return feas;
}

// Everything from the columns: after the snapshot, an axis or constraint change.
export function rebuild() {
  D.feasRows = []; D.badRows = []; bins.grid = null;
  D.okCount = 0;
  fresh.ok = []; fresh.done = []; // the columns already hold them
  D.top = []; D.conv = { evals: [], times: [], bestE: [], bestT: [], best: null, count: 0 };
  D.bestLatency = null;
  const ok = [], done = [];
  for (let r = 0; r < C.n; r++) {
    const s = statusOf(r);
    if (PENDING.has(s)) continue;
    done.push(r);
    if (s === "ok") ok.push(r);
  }
  const feas = addPoints(ok);
  D.front = frontierOf(pointsOf(feas)).map((p) => p.r);
  D.frontChanged = true;
  addTop(feas);
  done.sort((a, b) => (C.t[a] === null ? Infinity : C.t[a]) - (C.t[b] === null ? Infinity : C.t[b]) || C.id[a] - C.id[b]);
  addConvergence(done);
}

// The rows that changed since the last redraw (fresh.ok, fresh.done).
export function update() {
  const ok = fresh.ok, done = fresh.done;
  fresh.ok = []; fresh.done = [];
  const feas = addPoints(ok);
  if (feas.length) {
    const before = D.front;
    D.front = frontierOf(pointsOf(D.front.concat(feas))).map((p) => p.r);
    if (D.front.length !== before.length || D.front.some((r, i) => r !== before[i])) D.frontChanged = true;
    addTop(feas);
  }
  addConvergence(done);
}
