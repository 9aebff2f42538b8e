// Run page: a columnar snapshot over the websocket, then live events. Events only mark what
// changed; everything is redrawn at most once per animation frame. Built for 50,000
// candidates: columns instead of objects, incremental Pareto frontier, convergence and top-15,
// hover texts computed once per candidate, no DOM table of all candidates.
//
// Modules: state.js (config and columnar data), events.js (an event into the data), stream.js
// (websocket and sequence gaps), derived.js and bins.js (frontier, top, convergence; screen
// cells), render.js (a redraw), charts/ (Plotly charts), best.js, agents.js, status.js,
// insights.js, directions.js (panels, steering, stop), running.js (running candidates, cancel), axes.js (axis controls), log.js and
// history.js (event log, its first lines from the stored events), format.js and dom.js
// (helpers), scheduler.js (one redraw per frame; timings), offscreen.js (charts outside the
// window drawn when they scroll into view), ../early_socket.js (a classic script: the socket opened before Plotly loads).
import { initAxes } from "./axes.js";
import { initCompare } from "./best.js";
import { initFrontier } from "./charts/frontier.js";
import { initParcoords } from "./charts/parcoords.js";
import { initSteering, initStop } from "./directions.js";
import { initRunning } from "./running.js";
import { receive } from "./events.js";
import { loadStoredLog } from "./history.js";
import { redraw } from "./render.js";
import { flush, onRedraw, schedule, timings } from "./scheduler.js";
import { C, dirty, inflight, running } from "./state.js";
import { connect, seqStats, stream } from "./stream.js";
import { initWorkbench } from "./workbench.js";

onRedraw(redraw);
initAxes();
initCompare();
initSteering();
initStop();
initRunning();
initParcoords();
initWorkbench();

// for tests and benchmarks: feed events, wait for the next complete redraw
window.runPage = {
  receive, timings, seqStats, lastSeq: stream.lastSeq, settled: stream.settled, flush,
  count: () => C.n,
};

function onEvent(msg) {
  receive(msg);
  if (msg.event === "snapshot") loadStoredLog(msg.seq);
}

// While the run runs, time passes without events: the convergence chart's time line follows.
const CLOCK_MS = 1000;
// The running candidates' elapsed times tick with it.
setInterval(() => { if (running()) { dirty.clock = true; dirty.running = inflight.size > 0; schedule(); } }, CLOCK_MS);

connect(onEvent); // first: the snapshot is built while the charts initialise
initFrontier();
