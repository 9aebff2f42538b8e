// The run page's data: the page config, the run's meta (run state, objectives, constraints,
// space, agents, generations, insights, directions) and its candidates as columns (one array
// per field: 50,000 candidates without an object each). Rows are indexes into the columns.
import { finite, plotText } from "./format.js";

export const cfg = JSON.parse(document.getElementById("run-config").textContent);
export const PENDING = new Set(["queued", "running"]);
export const TOP = 15;

export let meta = null;
// When the run started and ended, in ms since the epoch (ended: null while it runs).
export const clock = { startedMs: Date.now(), endedMs: null };
// Columns: id, gen, agent (code into agents), status (code into statuses), t (seconds since
// the start when it finished, null while pending), params {name: [...]}, metrics {name: [...]}.
export const C = { n: 0, id: [], gen: [], agent: [], status: [], t: [], params: {}, metrics: {}, agents: [], statuses: [] };
export const rowOf = new Map(); // candidate id -> row
// Candidates being evaluated now: id -> {id, generation, agent, params, started_at} (the
// snapshot's meta.running, then candidate events with status "running").
export const inflight = new Map();
const hoverText = []; // row -> hover text (computed once)
// What needs redrawing: points (new candidates), full (rebuild everything from the columns),
// agents, insights, directions, state (run status), clock (time passed: the convergence line),
// running (the running candidates and their elapsed times).
export const dirty = { points: false, full: true, agents: false, insights: false, directions: false, state: false, clock: false, running: false };
// Rows that became ok, and rows that finished with any status, since the last redraw.
export const fresh = { ok: [], done: [] };
// The frontier chart's axes (metric names) and whether each is logarithmic.
export const axes = { x: null, y: null, logX: false, logY: false };

export const primary = () => meta.objectives[0];
export function directionOf(name) {
  const o = meta.objectives.find((o) => o.metric === name);
  if (o) return o.direction;
  return cfg.maximize.includes(name) ? "maximize" : "minimize";
}
export const sgn = (name) => (directionOf(name) === "maximize" ? -1 : 1); // orients every metric to minimisation
export const statusOf = (r) => C.statuses[C.status[r]];
export const metric = (name, r) => { const col = C.metrics[name]; return col ? col[r] : null; };
export const candidateUrl = (id) => cfg.candidateUrl.replace("/0/", `/${id}/`);
export const running = () => meta !== null && meta.run.state === "running";

export function feasible(r) {
  for (const c of meta.constraints) {
    const v = metric(c.metric, r);
    if (v === null || v === undefined || !isFinite(v)) return false;
    if (c.op === "<=" ? !(v <= c.value) : !(v >= c.value)) return false;
  }
  return true;
}
// "name=value" of one parameter value: a labelled parameter's value reads as its label, e.g. a
// recorded name (kernels.space.labels_of). meta.labels holds the goal's and the run's labelled
// values, so that a run narrowed since keeps the names of what it evaluated before.
export function paramText(name, v) {
  const p = meta && (meta.labels || []).find((q) => q.name === name);
  const i = p && typeof v === "number" ? p.values.indexOf(v) : -1;
  return `${name}=${i >= 0 ? p.labels[i] : v}`;
}
// A labelled parameter's values as an axis's ticks: {tickvals, ticktext} (labels escaped, as
// Plotly reads markup in tick text too), or null for a parameter without labels.
export function labelTicks(name) {
  const p = meta && (meta.labels || []).find((q) => q.name === name);
  return p ? { tickvals: p.values, ticktext: p.labels.map(plotText) } : null;
}
export function paramsText(r) {
  const parts = [];
  for (const name in C.params) { const v = C.params[name][r]; if (v !== null && v !== undefined) parts.push(paramText(name, v)); }
  return parts.join(" ");
}
export function textOf(r) {
  let s = hoverText[r];
  if (s === undefined) {
    s = `#${C.id[r]} gen ${C.gen[r]} (${plotText(C.agents[C.agent[r]])})<br>${plotText(paramsText(r))}`;
    hoverText[r] = s;
  }
  return s;
}
function code(list, value) {
  let i = list.indexOf(value);
  if (i < 0) { list.push(value); i = list.length - 1; }
  return i;
}

// The snapshot: {meta, columns} (swarm/web/snapshot.py). Everything is rebuilt at the next redraw.
export function loadSnapshot(data) {
  meta = data.meta;
  Object.assign(C, data.columns);
  rowOf.clear();
  for (let r = 0; r < C.n; r++) rowOf.set(C.id[r], r);
  hoverText.length = 0;
  clock.startedMs = Date.parse(meta.started_at) || Date.now();
  clock.endedMs = meta.run.state === "running" ? null : Date.parse(meta.finished_at) || null;
  inflight.clear();
  for (const c of meta.running || []) inflight.set(c.id, c);
  for (const k in dirty) dirty[k] = true;
}

// A candidate event ({id, generation, agent, status, params, metrics}) into the columns.
// Returns whether the candidate finished with this event (it was pending or unknown before).
export function upsert(c) {
  let r = rowOf.get(c.id);
  const wasDone = r !== undefined && !PENDING.has(statusOf(r));
  if (r === undefined) {
    r = C.n++;
    rowOf.set(c.id, r);
    C.id.push(c.id); C.gen.push(c.generation); C.agent.push(code(C.agents, c.agent));
    C.status.push(code(C.statuses, c.status)); C.t.push(null);
    for (const name in C.params) C.params[name].push(null);
    for (const name in C.metrics) C.metrics[name].push(null);
  } else {
    C.status[r] = code(C.statuses, c.status);
  }
  for (const name in c.params || {}) {
    if (!C.params[name]) C.params[name] = new Array(C.n).fill(null);
    C.params[name][r] = c.params[name];
  }
  for (const name in c.metrics || {}) {
    if (name.includes("[")) continue; // per-shape metrics: the candidate page has them
    if (!C.metrics[name]) C.metrics[name] = new Array(C.n).fill(null);
    C.metrics[name][r] = finite(c.metrics[name]);
  }
  dirty.points = true;
  if (c.status === "running") { inflight.set(c.id, c); dirty.running = true; }
  else if (inflight.delete(c.id)) dirty.running = true;
  if (wasDone || PENDING.has(c.status)) return false;
  C.t[r] = (Date.now() - clock.startedMs) / 1000;
  fresh.done.push(r);
  if (c.status === "ok") fresh.ok.push(r);
  return true;
}

// The run's state ({id, state, generation, budget, end_kind, end_reason, ...}): notes when it ended.
export function setRunState(run) {
  if (meta.run.state === "running" && run.state !== "running") clock.endedMs = Date.now();
  meta.run = run;
  dirty.state = dirty.clock = true;
}
