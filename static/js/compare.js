// Compare page: the timing samples of every candidate, per shape, side by side.
(function () {
  "use strict";
  const samples = JSON.parse(document.getElementById("compare-samples").textContent);
  const traces = [];
  for (const [name, byShape] of Object.entries(samples)) {
    const x = [], y = [];
    for (const [label, values] of Object.entries(byShape || {})) for (const v of values) { x.push(label); y.push(v); }
    traces.push({ type: "box", name, x, y, boxpoints: "outliers", marker: { size: 3 } });
  }
  Plotly.newPlot("compare-chart", traces, { boxmode: "group", margin: { t: 10, r: 10, b: 80, l: 60 },
    yaxis: { title: { text: "ms per call" } }, legend: { orientation: "h", y: 1.1 } }, { responsive: true, displaylogo: false });
})();
