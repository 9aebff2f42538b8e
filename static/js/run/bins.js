// Screen cells of the frontier chart: one point is drawn per CELL x CELL pixel cell (the best
// by the primary objective), so the WebGL work per redraw is bounded by the plot's area, not by
// the number of candidates; zooming re-bins at the new scale, so every candidate can be reached.
import { C, axes, primary, sgn } from "./state.js";

export const CELL = 8;
// view: the zoomed ranges {x: [lo, hi], y: [lo, hi]} in axis units (log10 on log axes), or null.
// grid: {x0, x1, y0, y1, nx, ny, logX, logY, feas: Map, bad: Map, changed, outside}, or null
// (to be made at the next draw). A cell map holds key -> {r: the row drawn, n: rows in the cell}.
export const bins = { view: null, grid: null };

const tf = (v, log) => (log ? (v > 0 ? Math.log10(v) : NaN) : v);

// A grid over the zoomed view, or over the extent of the rows, for a plot area of
// width x height pixels; feasRows and badRows are placed into it.
export function makeGrid(feasRows, badRows, [width, height]) {
  const { logX, logY } = axes;
  const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
  let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
  if (bins.view) { [x0, x1] = bins.view.x; [y0, y1] = bins.view.y; } else {
    for (const list of [feasRows, badRows]) for (const r of list) {
      const x = tf(xs[r], logX), y = tf(ys[r], logY);
      if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y;
    }
  }
  if (!isFinite(x0) || !isFinite(x1)) { x0 = 0; x1 = 1; } // no point yet: the first ones rebuild the grid
  if (!isFinite(y0) || !isFinite(y1)) { y0 = 0; y1 = 1; }
  if (!(x1 > x0)) { x0 -= 1; x1 += 1; }
  if (!(y1 > y0)) { y0 -= 1; y1 += 1; }
  const grid = { x0, x1, y0, y1, logX, logY, nx: Math.max(1, Math.ceil(width / CELL)), ny: Math.max(1, Math.ceil(height / CELL)),
                 feas: new Map(), bad: new Map(), outside: false, changed: true };
  bins.grid = grid;
  for (const r of feasRows) place(grid.feas, r);
  for (const r of badRows) place(grid.bad, r);
  return grid;
}

// Row r into its cell of `map` (grid.feas or grid.bad); a point outside an unzoomed grid
// marks it outside (a new extreme: the grid is remade at the next draw).
export function place(map, r) {
  const g = bins.grid;
  const x = tf(C.metrics[axes.x][r], g.logX), y = tf(C.metrics[axes.y][r], g.logY);
  if (!isFinite(x) || !isFinite(y)) return;
  const fx = (x - g.x0) / (g.x1 - g.x0), fy = (y - g.y0) / (g.y1 - g.y0);
  if (!(fx >= 0 && fx <= 1 && fy >= 0 && fy <= 1)) { if (!bins.view) g.outside = true; return; }
  const key = Math.min(g.nx - 1, Math.floor(fx * g.nx)) * 65536 + Math.min(g.ny - 1, Math.floor(fy * g.ny));
  const cell = map.get(key);
  if (!cell) { map.set(key, { r, n: 1 }); g.changed = true; return; }
  cell.n += 1;
  if (cell.n === 2) g.changed = true; // its hover text now says it hides others
  const m = primary().metric, col = C.metrics[m], s = sgn(m);
  if (col && col[r] !== null && (col[cell.r] === null || s * col[r] < s * col[cell.r])) { cell.r = r; g.changed = true; }
}
