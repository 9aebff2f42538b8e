// Run page: receives the run's events over a websocket and redraws the Pareto chart and the
// best-candidates table, at most once per animation frame (updates arrive in bursts).
(function () {
  "use strict";
  const cfg = JSON.parse(document.getElementById("run-config").textContent);
  const [xObj, yObj] = cfg.objectives;
  const candidates = new Map(); // id -> candidate dict (de-duplicated: snapshot and events overlap)
  let runState = null;
  let pending = false;

  const sign = (o) => (o.direction === "minimize" ? 1 : -1);

  function feasible(m) {
    return cfg.constraints.every((c) => {
      const v = m[c.metric];
      if (v === undefined || v === null || !isFinite(v)) return false;
      return c.op === "<=" ? v <= c.value : v >= c.value;
    });
  }

  // Two-objective Pareto frontier by sort and sweep, O(n log n); both objectives oriented to
  // minimisation with their sign (same rule as swarm/pareto.py).
  function frontier(points) {
    const sorted = points.slice().sort((a, b) => a.sx - b.sx || a.sy - b.sy);
    const front = [];
    let bestY = Infinity;
    for (const p of sorted) {
      if (p.sy < bestY) { front.push(p); bestY = p.sy; }
    }
    return front;
  }

  function schedule() {
    if (!pending) { pending = true; requestAnimationFrame(redraw); }
  }

  function redraw() {
    pending = false;
    const ok = [];
    for (const c of candidates.values()) {
      const m = c.metrics || {};
      if (c.status === "ok" && m[xObj.metric] !== undefined && m[yObj.metric] !== undefined) {
        ok.push({ c, x: m[xObj.metric], y: m[yObj.metric], sx: sign(xObj) * m[xObj.metric], sy: sign(yObj) * m[yObj.metric], feasible: feasible(m) });
      }
    }
    const good = ok.filter((p) => p.feasible);
    const bad = ok.filter((p) => !p.feasible);
    const front = frontier(good);
    const label = (p) => `#${p.c.id} gen ${p.c.generation} (${p.c.agent})<br>` +
      Object.entries(p.c.params).map(([k, v]) => `${k}=${v}`).join(" ");
    const trace = (pts, name, marker, mode) => ({
      type: "scattergl", mode: mode || "markers", name,
      x: pts.map((p) => p.x), y: pts.map((p) => p.y),
      customdata: pts.map((p) => p.c.id), text: pts.map(label), hoverinfo: "text+x+y", marker,
    });
    const traces = [
      trace(good, "candidates", { color: "#8aa1b9", size: 8 }),
      trace(bad, "breaks a constraint", { color: "#c0392b", size: 8, symbol: "circle-open" }),
      trace(front, "Pareto frontier", { color: "#e67e22", size: 12, line: { color: "#000", width: 1 } }, "lines+markers"),
    ];
    const layout = {
      margin: { t: 10, r: 10 },
      xaxis: { title: { text: xObj.metric }, type: "log" },
      yaxis: { title: { text: yObj.metric }, type: "log" },
      legend: { orientation: "h" },
      uirevision: "keep", // keep the engineer's zoom across live updates
    };
    Plotly.react("frontier-chart", traces, layout, { responsive: true, displaylogo: false });
    document.getElementById("n-points").textContent = String(ok.length);
    renderTable(good);
    renderState();
  }

  function fmt(v) {
    if (v === undefined || v === null) return "";
    return Math.abs(v) >= 0.01 && Math.abs(v) < 1e5 ? v.toPrecision(4) : v.toExponential(2);
  }

  function renderTable(good) {
    const rows = good.slice().sort((a, b) => a.sx - b.sx).slice(0, 15);
    const tbody = document.querySelector("#best-table tbody");
    tbody.replaceChildren(...rows.map((p) => {
      const tr = document.createElement("tr");
      const m = p.c.metrics;
      const cells = [p.c.id, p.c.generation, p.c.agent, Object.entries(p.c.params).map(([k, v]) => `${k}=${v}`).join(" "),
        fmt(m[xObj.metric]), fmt(m[yObj.metric]), fmt(m.gbps), p.c.status];
      cells.forEach((v, i) => {
        const td = document.createElement("td");
        if (i === 0) {
          const a = document.createElement("a");
          a.href = cfg.candidateUrl.replace("/0/", `/${p.c.id}/`);
          a.textContent = `#${v}`;
          td.appendChild(a);
        } else td.textContent = String(v);
        tr.appendChild(td);
      });
      return tr;
    }));
  }

  function renderState() {
    if (!runState) return;
    document.getElementById("run-state").textContent = runState.state;
    const stop = document.getElementById("stop-form");
    if (stop && runState.state !== "running") stop.remove();
    document.getElementById("run-generation").textContent = runState.generation;
    const counts = {};
    for (const c of candidates.values()) counts[c.status] = (counts[c.status] || 0) + 1;
    const done = Object.entries(counts).filter(([s]) => s !== "queued" && s !== "running").reduce((a, [, n]) => a + n, 0);
    document.getElementById("run-evaluated").textContent = String(done);
    document.getElementById("run-counts").textContent = Object.entries(counts).map(([s, n]) => `${s}: ${n}`).join(" · ");
  }

  function connect() {
    const proto = location.protocol === "https:" ? "wss" : "ws";
    const ws = new WebSocket(`${proto}://${location.host}/ws/runs/${cfg.run}/`);
    const wsState = document.getElementById("ws-state");
    ws.onopen = () => { wsState.textContent = "connected"; };
    ws.onclose = () => { wsState.textContent = "reconnecting"; setTimeout(connect, 2000); };
    ws.onmessage = (e) => {
      const msg = JSON.parse(e.data);
      if (msg.event === "snapshot") {
        runState = msg.data.run;
        for (const c of msg.data.candidates) candidates.set(c.id, c);
      } else if (msg.event === "candidate") {
        candidates.set(msg.data.id, msg.data);
      } else if (msg.event === "run") {
        runState = msg.data;
      }
      schedule();
    };
  }

  const chart = document.getElementById("frontier-chart");
  Plotly.newPlot(chart, [], { margin: { t: 10 } }, { responsive: true, displaylogo: false });
  chart.on("plotly_click", (ev) => {
    const id = ev.points[0] && ev.points[0].customdata;
    if (id) location.href = cfg.candidateUrl.replace("/0/", `/${id}/`);
  });
  connect();
})();
