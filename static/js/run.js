// Run page: a columnar snapshot over the websocket, then live events. Events only mark what
// changed; everything is redrawn at most once per animation frame. Built for 50,000
// candidates: columns instead of objects, incremental Pareto frontier, convergence and top-15,
// hover texts computed once per candidate, no DOM table of all candidates.
(function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("run-config").textContent);
  const $ = (id) => document.getElementById(id);
  const PENDING = new Set(["queued", "running"]);
  const TOP = 15;
  const LOG_MAX = 200;

  // ---- state -------------------------------------------------------------------------------
  let meta = null; // run, objectives, constraints, space, agents, generations, insights, directions
  const C = { n: 0, id: [], gen: [], agent: [], status: [], t: [], params: {}, metrics: {}, agents: [], statuses: [] };
  const rowOf = new Map(); // candidate id -> row
  const hoverText = []; // row -> hover text (computed once)
  let startedMs = Date.now();
  const dirty = { points: false, full: true, agents: false, insights: false, directions: false, state: false };
  let scheduled = false;
  let pendingOk = []; // rows that became ok since the last redraw
  let newlyDone = []; // rows that finished (any status) since the last redraw
  const logQueue = [];
  let waiters = [];
  const timings = { snapshotBytes: 0, snapshotAt: null, firstDrawAt: null, parcoordsAt: null, lastRedrawMs: null, redraws: 0, parts: {} };

  // derived, maintained incrementally
  let front = []; // rows on the 2-D Pareto frontier of the current axes (feasible ok)
  let top = []; // best TOP rows by primary objective (feasible ok)
  let conv = { evals: [], times: [], bestE: [], bestT: [], best: null, count: 0 };
  let bestLatency = null; // lowest latency_ms of a feasible ok candidate: the reference of "tied with best"
  let feasRows = [], badRows = []; // ok rows with both axis metrics, meeting / breaking the constraints
  let okCount = 0;
  // The chart draws one point per CELL x CELL pixel cell (the best by the primary objective), so
  // the WebGL work per redraw is bounded by the plot's area, not by the number of candidates;
  // zooming re-bins at the new scale, so every candidate can be reached.
  const CELL = 8;
  let view = null; // zoomed ranges {x: [lo, hi], y: [lo, hi]} in axis units (log10 on log axes)
  let grid = null; // {x0, x1, y0, y1, nx, ny, logX, logY, feas: Map, bad: Map, changed, outside}
  let frontChanged = true;

  const axes = { x: null, y: null };
  const compareSet = new Set();

  // ---- helpers -----------------------------------------------------------------------------
  const primary = () => meta.objectives[0];
  function directionOf(metric) {
    const o = meta.objectives.find((o) => o.metric === metric);
    if (o) return o.direction;
    return cfg.maximize.includes(metric) ? "maximize" : "minimize";
  }
  const sgn = (metric) => (directionOf(metric) === "maximize" ? -1 : 1);
  const statusOf = (r) => C.statuses[C.status[r]];
  const metric = (name, r) => { const col = C.metrics[name]; return col ? col[r] : null; };
  function fmt(v) {
    if (v === undefined || v === null || Number.isNaN(v)) return "";
    if (typeof v !== "number") return String(v);
    const a = Math.abs(v);
    return a === 0 ? "0" : a >= 0.01 && a < 1e5 ? v.toPrecision(4) : v.toExponential(2);
  }
  function feasible(r) {
    for (const c of meta.constraints) {
      const v = metric(c.metric, r);
      if (v === null || v === undefined || !isFinite(v)) return false;
      if (c.op === "<=" ? !(v <= c.value) : !(v >= c.value)) return false;
    }
    return true;
  }
  function paramsText(r) {
    const parts = [];
    for (const name in C.params) { const v = C.params[name][r]; if (v !== null && v !== undefined) parts.push(`${name}=${v}`); }
    return parts.join(" ");
  }
  function textOf(r) {
    let s = hoverText[r];
    if (s === undefined) {
      s = `#${C.id[r]} gen ${C.gen[r]} (${C.agents[C.agent[r]]})<br>${paramsText(r)}`;
      hoverText[r] = s;
    }
    return s;
  }
  const candidateUrl = (id) => cfg.candidateUrl.replace("/0/", `/${id}/`);
  function code(list, value) {
    let i = list.indexOf(value);
    if (i < 0) { list.push(value); i = list.length - 1; }
    return i;
  }
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const k in attrs || {}) {
      if (k === "class") e.className = attrs[k];
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
      else e.setAttribute(k, attrs[k]);
    }
    for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
    return e;
  }

  // ---- ingest ------------------------------------------------------------------------------
  function loadSnapshot(data) {
    meta = data.meta;
    const cols = data.columns;
    Object.assign(C, cols);
    rowOf.clear();
    for (let r = 0; r < C.n; r++) rowOf.set(C.id[r], r);
    hoverText.length = 0;
    startedMs = Date.parse(meta.started_at) || Date.now();
    setupAxes();
    setupSteering();
    dirty.full = dirty.agents = dirty.insights = dirty.directions = dirty.state = true;
  }

  function upsert(c) {
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
      if (name.includes("[")) continue;
      if (!C.metrics[name]) C.metrics[name] = new Array(C.n).fill(null);
      const v = c.metrics[name];
      C.metrics[name][r] = typeof v === "number" && isFinite(v) ? v : null;
    }
    if (!wasDone && !PENDING.has(c.status)) {
      C.t[r] = (Date.now() - startedMs) / 1000;
      newlyDone.push(r);
      if (c.status === "ok") pendingOk.push(r);
      log(`#${c.id} ${c.status}` + (c.status === "ok" ? ` ${primary().metric} ${fmt(metric(primary().metric, r))}` : "") + ` · ${c.agent}`, c.status === "ok" ? "" : "bad");
    }
    dirty.points = true;
  }

  function receive(msg) {
    const d = msg.data;
    switch (msg.event) {
      case "snapshot": loadSnapshot(d); log(`snapshot: ${d.columns.n} candidates`); break;
      case "candidate": if (meta) upsert(d); break;
      case "candidates": if (meta) d.items.forEach(upsert); break; // a generation's proposals, or a batch evaluated at once
      case "run":
        if (meta) { meta.run = d; dirty.state = true; log(`run ${d.state}, generation ${d.generation}`); }
        break;
      case "generation":
        if (meta) {
          meta.generations.push({ number: d.number, shares: d.shares, improvements: {} });
          if (meta.generations.length > 300) meta.generations.shift();
          for (const a of meta.agents) { a.share = d.shares[a.name] || 0; if (d.scores && a.name in d.scores) a.score = d.scores[a.name]; }
          meta.run.generation = d.number;
          dirty.agents = dirty.state = true;
          log(`generation ${d.number}: shares ${Object.entries(d.shares).map(([k, v]) => `${k} ${v}`).join(", ")}`);
        }
        break;
      case "generation_finished":
        if (meta) {
          if (d.agents) meta.agents = d.agents;
          const g = meta.generations.find((g) => g.number === d.number);
          if (g) g.improvements = d.improvements;
          dirty.agents = true;
          const imp = Object.entries(d.improvements || {}).filter(([, n]) => n > 0);
          log(`generation ${d.number} finished` + (imp.length ? `: frontier improved by ${imp.map(([k, n]) => `${k} (${n})`).join(", ")}` : ""));
        }
        break;
      case "insight":
        if (meta) {
          meta.insights = [d, ...meta.insights.filter((i) => i.id !== d.id)];
          dirty.insights = true;
          log(`insight: ${d.kind}` + (d.data && d.data.rule ? ` ${d.data.rule}` : ""));
        }
        break;
      case "direction":
        if (meta) {
          const i = meta.directions.findIndex((x) => x.id === d.id);
          if (i >= 0) meta.directions[i] = d; else meta.directions.push(d);
          if (d.state === "applied" && d.effect && d.effect.constraints_after) {
            meta.constraints = d.effect.constraints_after;
            dirty.full = true;
          }
          dirty.directions = true;
          log(`direction ${d.kind} ${d.state}` + (d.effect && d.effect.rejected ? `: ${d.effect.rejected}` : ""), d.state === "rejected" ? "bad" : "");
        }
        break;
      default: break;
    }
    schedule();
  }

  // ---- derived data ------------------------------------------------------------------------
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
    for (const r of rows) {
      conv.count += 1;
      if (statusOf(r) !== "ok" || !feasible(r)) continue;
      const lat = metric("latency_ms", r);
      if (typeof lat === "number" && (bestLatency === null || lat < bestLatency)) bestLatency = lat;
      if (!col || col[r] === null) continue;
      const v = col[r];
      if (conv.best === null || s * v < s * conv.best) {
        conv.best = v;
        conv.evals.push(conv.count); conv.bestE.push(v);
        conv.times.push(C.t[r] || 0); conv.bestT.push(v);
      }
    }
  }
  function addPoints(rows) {
    const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
    const feas = [];
    for (const r of rows) {
      okCount += 1;
      if (!xs || !ys || xs[r] === null || ys[r] === null || xs[r] === undefined || ys[r] === undefined) continue;
      if (feasible(r)) { feasRows.push(r); feas.push(r); if (grid) place(grid.feas, r); } else { badRows.push(r); if (grid) place(grid.bad, r); }
    }
    return feas;
  }
  // -- binning to screen cells
  const tf = (v, log) => (log ? (v > 0 ? Math.log10(v) : NaN) : v);
  function plotSize() {
    const fl = $("frontier-chart")._fullLayout;
    if (fl && fl._size && fl._size.w > 0) return [fl._size.w, fl._size.h];
    return [Math.max(200, $("frontier-chart").clientWidth - 70), 400];
  }
  function makeGrid() {
    const logX = $("x-log").checked, logY = $("y-log").checked;
    const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
    let x0 = Infinity, x1 = -Infinity, y0 = Infinity, y1 = -Infinity;
    if (view) { [x0, x1] = view.x; [y0, y1] = view.y; } else {
      for (const list of [feasRows, badRows]) for (const r of list) {
        const x = tf(xs[r], logX), y = tf(ys[r], logY);
        if (x < x0) x0 = x; if (x > x1) x1 = x; if (y < y0) y0 = y; if (y > y1) y1 = y;
      }
    }
    if (!isFinite(x0) || !isFinite(x1)) { x0 = 0; x1 = 1; } // no point yet: the first ones rebuild the grid
    if (!isFinite(y0) || !isFinite(y1)) { y0 = 0; y1 = 1; }
    if (!(x1 > x0)) { x0 -= 1; x1 += 1; }
    if (!(y1 > y0)) { y0 -= 1; y1 += 1; }
    const [w, h] = plotSize();
    grid = { x0, x1, y0, y1, logX, logY, nx: Math.max(1, Math.ceil(w / CELL)), ny: Math.max(1, Math.ceil(h / CELL)),
             feas: new Map(), bad: new Map(), outside: false, changed: true };
    for (const r of feasRows) place(grid.feas, r);
    for (const r of badRows) place(grid.bad, r);
  }
  function place(map, r) {
    const g = grid;
    const x = tf(C.metrics[axes.x][r], g.logX), y = tf(C.metrics[axes.y][r], g.logY);
    if (!isFinite(x) || !isFinite(y)) return;
    const fx = (x - g.x0) / (g.x1 - g.x0), fy = (y - g.y0) / (g.y1 - g.y0);
    if (!(fx >= 0 && fx <= 1 && fy >= 0 && fy <= 1)) { if (!view) g.outside = true; return; } // out of the zoomed view, or a new extreme
    const key = Math.min(g.nx - 1, Math.floor(fx * g.nx)) * 65536 + Math.min(g.ny - 1, Math.floor(fy * g.ny));
    const cell = map.get(key);
    if (!cell) { map.set(key, { r, n: 1 }); g.changed = true; return; }
    cell.n += 1;
    if (cell.n === 2) g.changed = true; // its hover text now says it hides others
    const m = primary().metric, col = C.metrics[m], s = sgn(m);
    if (col && col[r] !== null && (col[cell.r] === null || s * col[r] < s * col[cell.r])) { cell.r = r; g.changed = true; }
  }
  function rebuild() { // everything from the columns: after the snapshot, an axis or constraint change
    feasRows = []; badRows = []; grid = null;
    okCount = 0;
    pendingOk = []; newlyDone = []; // the columns already hold them
    top = []; conv = { evals: [], times: [], bestE: [], bestT: [], best: null, count: 0 };
    bestLatency = null;
    const ok = [], done = [];
    for (let r = 0; r < C.n; r++) {
      const s = statusOf(r);
      if (PENDING.has(s)) continue;
      done.push(r);
      if (s === "ok") ok.push(r);
    }
    const feas = addPoints(ok);
    front = frontierOf(pointsOf(feas)).map((p) => p.r);
    frontChanged = true;
    addTop(feas);
    done.sort((a, b) => (C.t[a] === null ? Infinity : C.t[a]) - (C.t[b] === null ? Infinity : C.t[b]) || C.id[a] - C.id[b]);
    addConvergence(done);
  }
  function update() { // the rows that changed since the last redraw
    const ok = pendingOk, done = newlyDone;
    pendingOk = []; newlyDone = [];
    const feas = addPoints(ok);
    if (feas.length) {
      const before = front;
      front = frontierOf(pointsOf(front.concat(feas))).map((p) => p.r);
      if (front.length !== before.length || front.some((r, i) => r !== before[i])) frontChanged = true;
      addTop(feas);
    }
    addConvergence(done);
  }

  // ---- drawing -----------------------------------------------------------------------------
  const plotConfig = { responsive: true, displaylogo: false };
  let revision = 0;

  function cellTraces(map) {
    const xs = C.metrics[axes.x], ys = C.metrics[axes.y];
    const x = [], y = [], id = [], text = [];
    for (const { r, n } of map.values()) {
      x.push(xs[r]); y.push(ys[r]); id.push(C.id[r]);
      text.push(n > 1 ? `${textOf(r)}<br>(the best of several candidates here: zoom in for the others)` : textOf(r));
    }
    return { x, y, id, text };
  }
  function drawFrontier() {
    $("n-points").textContent = String(okCount);
    $("n-feasible").textContent = String(feasRows.length);
    $("n-front").textContent = String(front.length);
    if (grid && !grid.outside && !grid.changed && !frontChanged) return null; // new points hidden under drawn ones
    if (!grid || grid.outside) makeGrid();
    grid.changed = false;
    frontChanged = false;
    const fr = front.slice().sort((a, b) => C.metrics[axes.x][a] - C.metrics[axes.x][b]);
    const logX = $("x-log").checked, logY = $("y-log").checked;
    const good = cellTraces(grid.feas), bad = cellTraces(grid.bad);
    revision += 1;
    const traces = [
      { type: "scattergl", mode: "markers", name: "feasible", x: good.x, y: good.y, customdata: good.id, text: good.text,
        hovertemplate: "%{text}<br>x=%{x}<br>y=%{y}<extra></extra>", marker: { color: "#8aa1b9", size: 6 } },
      { type: "scattergl", mode: "markers", name: "breaks a constraint", x: bad.x, y: bad.y, customdata: bad.id, text: bad.text,
        hovertemplate: "%{text}<br>x=%{x}<br>y=%{y}<extra>breaks a constraint</extra>",
        marker: { color: "#c0392b", size: 7, symbol: "x-thin-open", line: { width: 1, color: "#c0392b" } } },
      { type: "scattergl", mode: "lines+markers", name: "Pareto frontier", x: fr.map((r) => C.metrics[axes.x][r]),
        y: fr.map((r) => C.metrics[axes.y][r]), customdata: fr.map((r) => C.id[r]), text: fr.map(textOf),
        hovertemplate: "%{text}<br>x=%{x}<br>y=%{y}<extra>frontier</extra>", line: { shape: "hv", color: "#e67e22" },
        marker: { color: "#e67e22", size: 10, line: { color: "#000", width: 1 } } },
    ];
    const layout = {
      margin: { t: 10, r: 10, b: 45, l: 60 }, datarevision: revision, uirevision: `${axes.x}|${axes.y}|${logX}|${logY}`,
      xaxis: { title: { text: axes.x }, type: logX ? "log" : "linear" },
      yaxis: { title: { text: axes.y }, type: logY ? "log" : "linear" },
      legend: { orientation: "h", y: -0.18 }, hovermode: "closest",
    };
    $("n-shown").textContent = String(grid.feas.size + grid.bad.size);
    return Plotly.react("frontier-chart", traces, layout, plotConfig);
  }

  function drawConvergence() {
    const m = primary().metric;
    const ext = (xs, ys, last) => (xs.length ? { x: xs.concat([last]), y: ys.concat([ys[ys.length - 1]]) } : { x: [], y: [] });
    const a = ext(conv.evals, conv.bestE, conv.count);
    const lastT = C.n ? Math.max(conv.times.length ? conv.times[conv.times.length - 1] : 0, (meta.run.state === "running" ? (Date.now() - startedMs) / 1000 : 0)) : 0;
    const b = ext(conv.times, conv.bestT, lastT);
    const logY = $("y-log").checked && m === axes.y;
    return Plotly.react("convergence-chart", [
      { type: "scatter", mode: "lines+markers", name: "vs evaluations", x: a.x, y: a.y, line: { shape: "hv", color: "#1f5fa8" }, marker: { size: 5 } },
      { type: "scatter", mode: "lines+markers", name: "vs time (s)", x: b.x, y: b.y, xaxis: "x2", yaxis: "y2", line: { shape: "hv", color: "#1e8449" }, marker: { size: 5 } },
    ], {
      margin: { t: 10, r: 10, b: 40, l: 60 }, showlegend: false,
      grid: { rows: 2, columns: 1, pattern: "independent", roworder: "top to bottom" },
      xaxis: { title: { text: "evaluations" } }, yaxis: { title: { text: `best ${m}` }, type: logY ? "log" : "linear" },
      xaxis2: { title: { text: "seconds since start" } }, yaxis2: { title: { text: `best ${m}` }, type: logY ? "log" : "linear" },
      uirevision: "conv",
    }, plotConfig);
  }

  // Parallel coordinates over parameters, coloured by the chosen objective. WebGL parcoords is
  // the slowest chart to draw (seconds under software rendering, whatever the number of lines),
  // so it is drawn only while visible, after the other panels; it follows live events (at most
  // every PC_MIN_GAP ms, or 5x its own draw time) only while one draw takes under PC_LIVE_MAX ms,
  // and for runs of more than PC_AUTO_MAX candidates it waits for the engineer's click.
  const PC_MIN_GAP = 3000, PC_LIVE_MAX = 300, PC_AUTO_MAX = 5000;
  const pc = { visible: false, stale: true, drawnAt: 0, cost: 0, timer: null, allowed: false };
  function requestParcoords(force) {
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
    return done;
  }
  new IntersectionObserver((entries) => {
    pc.visible = entries.some((e) => e.isIntersecting);
    if (pc.visible && pc.stale) requestParcoords(pc.allowed);
  }, { rootMargin: "200px" }).observe($("parcoords-chart"));
  $("pc-draw").addEventListener("click", () => requestParcoords(true));

  function drawShares() { // budget shares per generation, stacked (a few SVG paths, not a bar per cell)
    const gens = meta.generations;
    const x = gens.map((g) => g.number);
    return Plotly.react("shares-chart", meta.agents.map((a) => ({
      type: "scatter", mode: "lines", stackgroup: "shares", name: a.name, x, y: gens.map((g) => (g.shares || {})[a.name] || 0),
      line: { width: 0.5, shape: "hv" }, hovertemplate: `${a.name}: %{y} at generation %{x}<extra></extra>`,
    })), { margin: { t: 10, r: 10, b: 35, l: 40 }, xaxis: { title: { text: "generation" } },
           yaxis: { title: { text: "candidates asked" } }, legend: { orientation: "h", y: -0.35 } }, plotConfig);
  }

  function renderAgents() {
    const total = meta.agents.reduce((s, a) => s + (a.share || 0), 0) || 1;
    $("agents-table").tBodies[0].replaceChildren(...meta.agents.slice().sort((a, b) => b.credit - a.credit || b.improvements - a.improvements).map((a) =>
      el("tr", { class: a.paused ? "muted" : "" },
        el("td", {}, el("code", {}, a.name), a.paused ? " (paused)" : ""), el("td", {}, a.kind),
        el("td", { class: "num" }, a.evaluations), el("td", { class: "num" }, a.improvements),
        el("td", { class: "num" }, fmt(a.credit)),
        el("td", {}, el("span", { class: "sharebar", style: `width:${Math.round(100 * (a.share || 0) / total)}%` }), ` ${a.share || 0}`),
        el("td", { class: "num" }, fmt(a.score)), el("td", { class: "num" }, fmt(a.boost)))));
  }

  function closestRows() { // no feasible candidate: the ok rows of least total violation (violation.js)
    const ranked = [];
    for (let r = 0; r < C.n; r++) if (statusOf(r) === "ok") ranked.push([window.totalViolation(meta.constraints, (k) => metric(k, r)), r]);
    ranked.sort((a, b) => a[0] - b[0] || C.id[a[1]] - C.id[b[1]]);
    return ranked.slice(0, TOP);
  }
  function renderTop() {
    const m = primary().metric;
    const others = meta.objectives.slice(1).map((o) => o.metric);
    const closest = !top.length && okCount && meta.constraints.length ? closestRows() : null;
    const notice = $("no-feasible");
    notice.hidden = !closest;
    if (closest) notice.textContent = `No feasible candidate: none of the ${okCount} ok candidates meets the constraints (` +
      meta.constraints.map((c) => `${c.metric} ${c.op} ${c.value}`).join("; ") + "). The table lists the closest, by total violation.";
    const violations = new Map((closest || []).map(([v, r]) => [r, v]));
    const rows = closest ? closest.map(([, r]) => r) : top;
    const head = $("best-table").tHead.rows[0];
    head.replaceChildren(...["", "#", "Gen", "Agent", "Parameters", m, ...others, "GB/s", ...(closest ? ["Violation"] : ["Tie"])].map((h) => el("th", {}, h)));
    const floor = meta.ties && meta.ties.noise_floor ? meta.ties.noise_floor.floor : null;
    const tieNote = $("tie-note");
    if (tieNote && floor !== null) {
      tieNote.textContent = `Tied with best: latency_ms within the noise floor of this target (${(100 * floor).toFixed(1)}%, ` +
        `${meta.ties.noise_floor.source === "stored" ? "measured on its worker" : "default: none measured yet"}) of the best` +
        (bestLatency !== null ? ` (${fmt(bestLatency)} ms)` : "") + ": the difference cannot be told apart there.";
    }
    const tied = (r) => { const v = metric("latency_ms", r); return floor !== null && bestLatency !== null && typeof v === "number" && v <= bestLatency * (1 + floor); };
    $("best-table").tBodies[0].replaceChildren(...rows.map((r) => {
      const id = C.id[r];
      const box = el("input", { type: "checkbox", title: "compare", "data-id": id });
      box.checked = compareSet.has(id);
      box.addEventListener("change", () => toggleCompare(id, box.checked));
      return el("tr", {}, el("td", {}, box), el("td", {}, el("a", { href: candidateUrl(id) }, `#${id}`)),
        el("td", {}, C.gen[r]), el("td", {}, C.agents[C.agent[r]]), el("td", {}, el("code", {}, paramsText(r))),
        el("td", { class: "num" }, fmt(metric(m, r))), ...others.map((o) => el("td", { class: "num" }, fmt(metric(o, r)))),
        el("td", { class: "num" }, fmt(metric("gbps", r))),
        closest ? el("td", { class: "num" }, fmt(violations.get(r)))
          : el("td", { class: "tie" }, metric("latency_ms", r) === bestLatency ? "best" : tied(r) ? "tied with best" : ""));
    }));
  }

  function renderState() {
    const s = meta.run;
    $("run-state").textContent = s.state;
    $("run-state").className = `badge state-${s.state}`;
    const stop = $("stop-form");
    if (stop && s.state !== "running") stop.remove();
    $("run-end").hidden = !s.end_reason;  // why the run ended: budget, wall time, exhausted space, who stopped it, what failed
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

  function renderInsights() {
    const list = $("insights");
    const items = meta.insights.map((i) => {
      const d = i.data || {};
      let body;
      if (i.kind === "importance") {
        const entries = Object.entries(d.importances || {}).sort((a, b) => b[1] - a[1]);
        body = el("div", {}, `parameter importance for ${d.objective || "the objective"} (${d.method || ""}, n=${d.n || "?"}): `,
          ...entries.map(([k, v]) => el("span", { class: "imp" }, el("code", {}, k), ` ${(100 * v).toFixed(0)}%`)));
      } else if (i.kind === "failure_rule") {
        body = el("div", {}, "failure rule: ", el("code", {}, d.rule || ""), ` → ${d.status || "failure"}`,
          d.support !== undefined ? ` (support ${d.support}, precision ${fmt(d.precision)})` : "");
        if (d.restriction) {
          const btn = el("button", { type: "button", class: "small needs-running", "data-insight": i.id }, "Accept restriction");
          btn.hidden = meta.run.state !== "running" || !cfg.canSteer;
          btn.addEventListener("click", () => accept(i.id, btn));
          body.append(el("div", {}, "suggested restriction ", el("code", {}, d.restriction), " ", btn));
        }
      } else if (i.kind === "best_config") {
        body = el("div", {}, `best on ${d.shape || "?"}: `, el("code", {}, Object.entries(d.params || {}).map(([k, v]) => `${k}=${v}`).join(" ")),
          ` ${fmt(d.latency_ms)} ms`);
      } else body = el("div", {}, JSON.stringify(d));
      return el("li", { class: `insight insight-${i.kind}` }, el("span", { class: "badge" }, i.kind), " ", body);
    });
    list.replaceChildren(...(items.length ? items : [el("li", { class: "hint" }, "No insights yet: they come after the first generations.")]));
  }

  function renderDirections() {
    $("directions-list").replaceChildren(...meta.directions.slice().reverse().map((d) => el("li", {},
      el("span", { class: `badge dir-${d.state}` }, d.state), " ", el("code", {}, d.kind), " ",
      Object.keys(d.payload || {}).length ? el("code", {}, JSON.stringify(d.payload)) : "",
      d.author ? ` by ${d.author}` : "", d.applied_generation ? ` at generation ${d.applied_generation}` : "",
      d.effect && d.effect.rejected ? el("span", { class: "error" }, ` ${d.effect.rejected}`) : "",
      d.effect && d.effect.space_size_after !== undefined ? ` (space ${d.effect.space_size_before} → ${d.effect.space_size_after})` : "")));
  }

  function log(text, cls) {
    logQueue.push({ text, cls, at: new Date() });
    if (logQueue.length > LOG_MAX) logQueue.splice(0, logQueue.length - LOG_MAX);
  }
  function flushLog() {
    if (!logQueue.length) return;
    const ol = $("event-log");
    const frag = document.createDocumentFragment();
    for (const e of logQueue.splice(0)) {
      frag.prepend(el("li", { class: e.cls || "" }, el("time", {}, e.at.toLocaleTimeString()), " ", e.text));
    }
    ol.prepend(frag);
    while (ol.children.length > LOG_MAX) ol.lastElementChild.remove();
  }

  function timed(name, draw) { // how long each chart takes, for the benchmark
    const t0 = performance.now();
    const done = draw();
    timings.parts[name] = performance.now() - t0; // the synchronous part: Plotly draws before returning
    return done;
  }

  function schedule() {
    if (!scheduled) { scheduled = true; requestAnimationFrame(redraw); }
  }

  async function redraw() {
    scheduled = false;
    if (!meta) return;
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
    if (dirty.state) renderState();
    if (dirty.agents) { renderAgents(); jobs.push(timed("shares", drawShares)); }
    if (dirty.insights) renderInsights();
    if (dirty.directions) renderDirections();
    dirty.points = dirty.state = dirty.agents = dirty.insights = dirty.directions = false;
    flushLog();
    await Promise.all(jobs);
    timings.lastRedrawMs = performance.now() - t0;
    timings.redraws += 1;
    if (timings.firstDrawAt === null) { timings.firstDrawAt = performance.now(); document.body.dataset.drawn = "1"; }
    const w = waiters; waiters = [];
    w.forEach((f) => f());
  }

  // ---- controls ----------------------------------------------------------------------------
  function setupAxes() {
    const names = Object.keys(C.metrics);
    const [o1, o2] = meta.objectives;
    axes.x = axes.x && names.includes(axes.x) ? axes.x : o1.metric;
    axes.y = axes.y && names.includes(axes.y) ? axes.y : (o2 ? o2.metric : names.find((n) => n !== o1.metric) || o1.metric);
    for (const [sel, val] of [[$("x-axis"), axes.x], [$("y-axis"), axes.y], [$("pc-color"), primary().metric]]) {
      sel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
      sel.value = val;
    }
    $("x-log").checked = ["latency_ms", "max_rel_error", "max_abs_error"].includes(axes.x);
    $("y-log").checked = ["latency_ms", "max_rel_error", "max_abs_error"].includes(axes.y);
  }
  for (const id of ["x-axis", "y-axis", "x-log", "y-log"]) {
    $(id).addEventListener("change", () => { axes.x = $("x-axis").value; axes.y = $("y-axis").value; view = null; dirty.full = true; schedule(); });
  }
  $("pc-color").addEventListener("change", () => requestParcoords(true));

  function toggleCompare(id, on) {
    if (on) compareSet.add(id); else compareSet.delete(id);
    const tray = $("compare-tray");
    tray.replaceChildren(...[...compareSet].map((c) => el("span", { class: "chip" }, el("a", { href: candidateUrl(c) }, `#${c}`),
      el("button", { type: "button", class: "link", title: "remove", onclick: () => { toggleCompare(c, false); renderTop(); } }, "×"))));
    $("compare-go").disabled = compareSet.size < 2;
  }
  $("compare-go").addEventListener("click", () => { location.href = `${cfg.compareUrl}?ids=${[...compareSet].join(",")}`; });

  // ---- steering ----------------------------------------------------------------------------
  function setupSteering() {
    const params = (meta.space.parameters || []).map((p) => p.name);
    const paramSel = document.querySelector("#direction-form select[name=param]");
    if (paramSel) {
      paramSel.replaceChildren(...params.map((n) => el("option", { value: n }, n)));
      paramSel.dispatchEvent(new Event("change"));
    }
    const agentSel = document.querySelector("#direction-form select[name=agent]");
    if (agentSel) agentSel.replaceChildren(...meta.agents.map((a) => el("option", { value: a.name }, a.name)));
    const metricSel = document.querySelector("#direction-form select[name=metric]");
    if (metricSel) {
      const names = [...new Set([...Object.keys(C.metrics), ...meta.constraints.map((c) => c.metric)])];
      metricSel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
    }
  }
  const form = $("direction-form");
  if (form) {
    const kindSel = form.querySelector("select[name=kind]");
    const showFields = () => form.querySelectorAll("[data-kinds]").forEach((e) => {
      e.hidden = !e.dataset.kinds.split(" ").includes(kindSel.value);
    });
    kindSel.addEventListener("change", showFields);
    showFields();
    const paramSel = form.querySelector("select[name=param]");
    paramSel.addEventListener("change", () => {
      const p = meta && (meta.space.parameters || []).find((x) => x.name === paramSel.value);
      $("param-values").textContent = p ? `values: ${p.values.join(", ")}` : "";
    });
    form.addEventListener("submit", async (ev) => {
      ev.preventDefault();
      await post(form.action, new FormData(form), $("direction-error"), form.querySelector("button[type=submit]"));
    });
  }
  async function post(url, body, errorEl, button) {
    errorEl.textContent = "";
    if (button) button.disabled = true;
    try {
      const resp = await fetch(url, { method: "POST", body, headers: { Accept: "application/json", "X-CSRFToken": csrf() }, credentials: "same-origin" });
      const data = await resp.json().catch(() => ({ ok: false, error: `HTTP ${resp.status}` }));
      if (!data.ok) { errorEl.textContent = data.error || `HTTP ${resp.status}`; return false; }
      const d = data.direction;
      if (!meta.directions.some((x) => x.id === d.id)) meta.directions.push(d);
      dirty.directions = true;
      log(`direction ${d.kind} submitted: ${JSON.stringify(d.payload)}`);
      schedule();
      return true;
    } catch (e) {
      errorEl.textContent = `could not submit: ${e}`;
      return false;
    } finally {
      if (button) button.disabled = false;
    }
  }
  async function accept(insightId, btn) {
    const ok = await post(cfg.acceptUrl.replace("/0/", `/${insightId}/`), new FormData(), $("insight-error"), btn);
    if (ok) { btn.textContent = "Accepted"; btn.disabled = true; }
  }
  function csrf() {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  // ---- event sequence ----------------------------------------------------------------------
  // The snapshot carries the seq of the last event it includes; each event the next number
  // (1, 2, ... per run). An event at lastSeq + 1 is shown; at or below lastSeq it was shown
  // already (or is in the snapshot); above lastSeq + 1 it waits while the gap is filled from
  // GET eventsUrl?after=lastSeq, since the channel layer drops events for a page too far behind.
  const GAP_WAIT_MS = 300; // events of concurrent publishers arrive slightly out of order
  const TAIL_CHECK_MS = 10000; // a running run quiet this long: ask whether its last events were lost
  let lastSeq = null;
  let held = []; // live events above a gap
  let filling = null, gapTimer = null, tailTimer = null;
  const seqStats = { live: 0, backfilled: 0, fills: 0 };

  function onMessage(msg) {
    if (msg.event === "snapshot") {
      lastSeq = typeof msg.seq === "number" ? msg.seq : null;
      held = [];
      receive(msg);
    } else if (lastSeq === null || typeof msg.seq !== "number") {
      receive(msg);
    } else if (msg.seq > lastSeq) {
      held.push(msg);
      drainHeld();
    }
    armTailCheck();
  }
  function show(msg, how) { lastSeq = msg.seq; seqStats[how]++; receive(msg); }
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
  async function fill() {
    if (gapTimer) { clearTimeout(gapTimer); gapTimer = null; }
    if (filling || lastSeq === null) return;
    filling = true;
    try {
      for (;;) {
        const resp = await fetch(`${cfg.eventsUrl}?after=${lastSeq}`, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
        const page = await resp.json();
        for (const e of page.events) if (e.seq > lastSeq) show(e, "backfilled");
        if (!page.more) break;
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
    tailTimer = setTimeout(() => { tailTimer = null; if (meta && meta.run.state === "running") { fill(); armTailCheck(); } }, TAIL_CHECK_MS);
  }

  // ---- websocket ---------------------------------------------------------------------------
  function connect() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}/ws/runs/${cfg.run}/?columns=1`);
    const wsState = $("ws-state");
    ws.onopen = () => { wsState.textContent = "connected"; };
    ws.onclose = () => { wsState.textContent = "reconnecting"; setTimeout(connect, 2000); };
    ws.onmessage = (e) => {
      if (timings.snapshotAt === null) { timings.snapshotAt = performance.now(); timings.snapshotBytes = e.data.length; }
      onMessage(JSON.parse(e.data));
    };
  }

  // for tests and benchmarks: feed events, wait for the next complete redraw
  window.runPage = {
    receive, timings, seqStats, lastSeq: () => lastSeq, settled: () => !filling && !held.length,
    flush: () => new Promise((resolve) => { waiters.push(resolve); schedule(); }),
    count: () => C.n,
  };
  connect(); // first: the snapshot is built while the charts initialise
  const chart = $("frontier-chart");
  // Empty WebGL traces now, so that WebGL and its shaders start while the snapshot is on its way.
  const empty = (name) => ({ type: "scattergl", mode: "markers", name, x: [], y: [] });
  Plotly.newPlot(chart, [empty("feasible"), empty("breaks a constraint"), empty("Pareto frontier")],
    { margin: { t: 10, r: 10, b: 45, l: 60 }, legend: { orientation: "h", y: -0.18 } }, plotConfig).then(() => {
    chart.on("plotly_relayout", (ev) => { // zoom or pan: re-bin at the new scale
      const fl = chart._fullLayout;
      if (ev["xaxis.autorange"] || ev["yaxis.autorange"] || ev.autosize) view = null;
      else if (Object.keys(ev).some((k) => k.startsWith("xaxis.range") || k.startsWith("yaxis.range"))) {
        view = { x: fl.xaxis.range.slice(), y: fl.yaxis.range.slice() };
      } else return;
      grid = null; dirty.points = true; schedule();
    });
    chart.on("plotly_click", (ev) => {
      const p = ev.points && ev.points[0];
      if (!p || p.customdata === undefined) return;
      const id = Number(p.customdata);
      const e = ev.event || {};
      if (e.shiftKey || e.ctrlKey || e.metaKey) { toggleCompare(id, !compareSet.has(id)); renderTop(); } else location.href = candidateUrl(id);
    });
  });

})();
