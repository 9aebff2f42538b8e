// The run's events: a websocket that sends the columnar snapshot, then live events, each with
// the next sequence number of the run (1, 2, ...). The snapshot carries the seq of the last
// event it includes. An event at lastSeq + 1 is shown; at or below lastSeq it was shown already
// (or is in the snapshot); above lastSeq + 1 it waits while the gap is filled from
// GET eventsUrl?after=lastSeq, since the channel layer drops events for a page too far behind.
// A running run quiet for TAIL_CHECK_MS is asked for events the socket may have lost.
import { $ } from "./dom.js";
import { log } from "./log.js";
import { timings } from "./scheduler.js";
import { cfg, running } from "./state.js";

const GAP_WAIT_MS = 300; // events of concurrent publishers arrive slightly out of order
const TAIL_CHECK_MS = 10000;
const RECONNECT_MS = 2000;

let handle = null; // receives each event in sequence: handle(msg)
let lastSeq = null;
let held = []; // live events above a gap
let filling = null, gapTimer = null, tailTimer = null;
export const seqStats = { live: 0, backfilled: 0, fills: 0 };

export const stream = {
  lastSeq: () => lastSeq,
  settled: () => !filling && !held.length,
};

// GET eventsUrl?after=`after`: pages of {events: [{event, seq, data}], last_seq, more}.
export async function* storedEvents(after) {
  for (;;) {
    const resp = await fetch(`${cfg.eventsUrl}?after=${after}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
    if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
    const page = await resp.json();
    yield page.events;
    if (!page.more || !page.events.length) return;
    after = page.events[page.events.length - 1].seq;
  }
}

function onMessage(msg) {
  if (msg.event === "snapshot") {
    lastSeq = typeof msg.seq === "number" ? msg.seq : null;
    held = [];
    handle(msg);
  } else if (lastSeq === null || typeof msg.seq !== "number") {
    handle(msg);
  } else if (msg.seq > lastSeq) {
    held.push(msg);
    drainHeld();
  }
  armTailCheck();
}
function show(msg, how) { lastSeq = msg.seq; seqStats[how]++; handle(msg); }
function drainHeld() {
  if (filling) return;
  held.sort((a, b) => a.seq - b.seq);
  while (held.length && held[0].seq <= lastSeq + 1) {
    const m = held.shift();
    if (m.seq === lastSeq + 1) show(m, "live");
  }
  if (held.length && !gapTimer) gapTimer = setTimeout(fill, GAP_WAIT_MS);
  else if (!held.length && gapTimer) { clearTimeout(gapTimer); gapTimer = null; }
}

// Fetches the events after lastSeq and shows them.
export async function fill() {
  if (gapTimer) { clearTimeout(gapTimer); gapTimer = null; }
  if (filling || lastSeq === null) return;
  filling = true;
  try {
    for await (const events of storedEvents(lastSeq)) {
      for (const e of events) if (e.seq > lastSeq) show(e, "backfilled");
    }
    seqStats.fills++;
  } catch (e) {
    log(`could not fetch missed events: ${e}`, "bad");
    gapTimer = setTimeout(fill, 5000);
  } finally {
    filling = null;
  }
  drainHeld(); // what is still above a gap after the fill was published after it: wait again
}
function armTailCheck() {
  if (tailTimer) clearTimeout(tailTimer);
  tailTimer = setTimeout(() => { tailTimer = null; if (running()) { fill(); armTailCheck(); } }, TAIL_CHECK_MS);
}

// Opens the websocket (and reopens it after it closes); handler(msg) gets each event in order.
// The first time it adopts the socket early_socket.js opened while the page loaded, and
// replays what that socket received meanwhile.
export function connect(handler) {
  handle = handler;
  const early = window.runEarlySocket && !window.runEarlySocket.closed ? window.runEarlySocket : null;
  window.runEarlySocket = null;
  const proto = location.protocol === "https:" ? "wss" : "ws";
  const ws = early ? early.ws : new WebSocket(`${proto}://${location.host}/ws/runs/${cfg.run}/?columns=1`);
  const wsState = $("ws-state");
  ws.onopen = () => { wsState.textContent = "connected"; };
  ws.onclose = () => { wsState.textContent = "reconnecting"; setTimeout(() => connect(handler), RECONNECT_MS); };
  ws.onmessage = (e) => {
    if (timings.snapshotAt === null) { timings.snapshotAt = performance.now(); timings.snapshotBytes = e.data.length; }
    onMessage(JSON.parse(e.data));
  };
  if (!early) return;
  if (early.opened) wsState.textContent = "connected";
  if (early.firstAt !== null) { timings.snapshotAt = early.firstAt; timings.snapshotBytes = early.messages[0].data.length; }
  for (const e of early.messages) ws.onmessage(e);
}
