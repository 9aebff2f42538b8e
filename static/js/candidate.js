// Candidate page: timing distribution (box per shape with every sample), roofline (the
// candidate's point per shape under the target's bandwidth and compute ceilings), and for CUDA
// the static resources and PTX fetched from the server (nvcc runs there, cached).
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("candidate-charts").textContent);
  const cfg = { responsive: true, displaylogo: false };
  const esc = (v) => String(v ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);

  if (document.getElementById("timing-chart")) {
    const labels = Object.keys(data.samples || {});
    Plotly.newPlot("timing-chart", labels.map((label) => ({
      type: "box", name: label, y: data.samples[label], boxpoints: "all", jitter: 0.4, pointpos: 0, marker: { size: 3 },
      hovertemplate: "%{y:.4g} ms<extra>" + label + "</extra>",
    })), { margin: { t: 10, r: 10, b: 80, l: 60 }, yaxis: { title: { text: "ms per call" } }, showlegend: false }, cfg);
  }

  if (document.getElementById("roofline-chart") && data.roofline) {
    const { ceilings, points } = data.roofline;
    const src = document.getElementById("roofline-source");
    src.textContent = ceilings.gbps && ceilings.gflops
      ? `Ceilings: ${ceilings.gbps.toFixed(1)} GB/s and ${ceilings.gflops.toFixed(1)} GFLOP/s; source: ${ceilings.source}. ` +
        "Arithmetic intensity = the workload's FLOP / compulsory DRAM bytes per shape."
      : `No ceilings: ${ceilings.source}`;
    const ai = points.map((p) => p.intensity);
    const ridge = ceilings.gbps && ceilings.gflops ? ceilings.gflops / ceilings.gbps : 1;
    const lo = Math.min(...ai, ridge, 0.05) / 4, hi = Math.max(...ai, ridge, 1) * 8;
    const traces = [];
    if (ceilings.gbps && ceilings.gflops) {
      const xs = [lo, ridge, hi];
      traces.push({ type: "scatter", mode: "lines", name: "roof", x: xs, y: xs.map((x) => Math.min(ceilings.gflops, x * ceilings.gbps)),
        line: { color: "#1d2430", width: 2 }, hovertemplate: "roof at AI %{x:.3g}: %{y:.4g} GFLOP/s<extra></extra>" });
    }
    traces.push({ type: "scatter", mode: "markers+text", name: "this candidate", x: ai, y: points.map((p) => p.gflops),
      text: points.map((p) => p.label), textposition: "top center", textfont: { size: 10 },
      customdata: points.map((p) => [p.gbps, p.latency_ms]), marker: { size: 11, color: "#e67e22", line: { color: "#000", width: 1 } },
      hovertemplate: "%{text}<br>AI %{x:.3g} FLOP/B<br>%{y:.4g} GFLOP/s, %{customdata[0]:.4g} GB/s<br>%{customdata[1]:.4g} ms<extra></extra>" });
    Plotly.newPlot("roofline-chart", traces, {
      margin: { t: 10, r: 10, b: 50, l: 60 }, showlegend: false,
      xaxis: { type: "log", title: { text: "arithmetic intensity (FLOP/byte)" } },
      yaxis: { type: "log", title: { text: "GFLOP/s" } },
    }, cfg);
  }

  const box = document.getElementById("cuda-static");
  if (box) {
    const body = document.getElementById("static-body");
    fetch(box.dataset.url, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then((r) => r.json())
      .then((d) => {
        if (!d.available) {
          body.replaceChildren(Object.assign(document.createElement("p"), { className: "hint", textContent: `Static analysis unavailable: ${d.reason}` }));
          return;
        }
        const s = d.summary;
        const rows = Object.entries(s.kernels || {}).map(([k, v]) =>
          `<tr><td><code>${esc(k)}</code></td><td class="num">${esc(v.registers)}</td><td class="num">${v.spill_stores}/${v.spill_loads}</td><td class="num">${v.stack_frame_bytes ?? ""}</td><td class="num">${v.smem_static_bytes}</td><td class="num">${v.barriers ?? ""}</td></tr>`).join("");
        const launches = (s.launches || []).map((l) =>
          `<tr><td>${esc(l.shape)}</td><td><code>${esc(l.kernel)}</code></td><td>${l.grid.join("×")}</td><td>${l.block.join("×")}</td><td class="num">${l.shared_mem_bytes}</td><td class="num">${l.occupancy !== undefined ? (100 * l.occupancy).toFixed(0) + "%" : ""}</td><td>${esc(l.limiting_factor)}</td></tr>`).join("");
        body.innerHTML = `<p class="hint">nvcc ${esc(s.nvcc)}, ${esc(s.arch)}</p>
          <table class="grid"><thead><tr><th>Kernel</th><th>Registers</th><th>Spill stores/loads</th><th>Stack (B)</th><th>Static smem (B)</th><th>Barriers</th></tr></thead><tbody>${rows}</tbody></table>
          <h3>Launches at the timed shapes</h3>${d.plan_error ? `<p class="error"></p>` : ""}
          <table class="grid"><thead><tr><th>Shape</th><th>Kernel</th><th>Grid</th><th>Block</th><th>Dyn. smem (B)</th><th>Occupancy</th><th>Limited by</th></tr></thead><tbody>${launches}</tbody></table>
          <details><summary>PTX</summary><pre class="log" id="ptx"></pre></details>`;
        if (d.plan_error) body.querySelector("p.error").textContent = d.plan_error;
        document.getElementById("ptx").textContent = d.ptx;
      })
      .catch((e) => { body.textContent = `Static analysis failed: ${e}`; });
  }
})();
