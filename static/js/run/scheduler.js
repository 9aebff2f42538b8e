// One redraw per animation frame at most: schedule() asks for it, the redraw function given to
// onRedraw() does it, flush() resolves after the next complete redraw. Also the draw timings
// the benchmark reads (window.runPage.timings).
export const timings = { snapshotBytes: 0, snapshotAt: null, firstDrawAt: null, parcoordsAt: null, parcoordsDraws: 0,
                         lastRedrawMs: null, redraws: 0, parts: {} };

let redrawFn = null;
let scheduled = false;
let waiters = [];

export function onRedraw(fn) { redrawFn = fn; }

export function schedule() {
  if (!scheduled) { scheduled = true; requestAnimationFrame(run); }
}

async function run() {
  scheduled = false;
  if (!redrawFn || (await redrawFn()) === false) return; // nothing to draw yet: the waiters wait on
  const w = waiters; waiters = [];
  w.forEach((f) => f());
}

export function flush() {
  return new Promise((resolve) => { waiters.push(resolve); schedule(); });
}

// Runs draw() and records how long its synchronous part took (Plotly draws before returning).
export function timed(name, draw) {
  const t0 = performance.now();
  const done = draw();
  timings.parts[name] = performance.now() - t0;
  return done;
}
