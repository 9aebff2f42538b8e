// Engine pages: benchmark history, per-operator breakdown, plan comparison (Plotly).
(function () {
  "use strict";
  function data(id) { var el = document.getElementById(id); return el ? JSON.parse(el.textContent) : null; }
  var layout = { margin: { l: 60, r: 10, t: 10, b: 60 }, legend: { orientation: "h" } };

  var history = data("history-data");
  if (history && document.getElementById("history-chart")) {
    var keys = {};
    history.forEach(function (h) { Object.keys(h.metrics || {}).forEach(function (k) { if (/_ms$/.test(k)) keys[k] = 1; }); });
    var traces = Object.keys(keys).map(function (k) {
      var pts = history.filter(function (h) { return h.metrics && h.metrics[k] != null; });
      return { name: k.replace(/_ms$/, ""), mode: "lines+markers", x: pts.map(function (h) { return h.at; }),
               y: pts.map(function (h) { return h.metrics[k]; }),
               text: pts.map(function (h) { return "#" + h.id + " " + h.trigger + ": " + h.label + " (" + h.status + ")"; }) };
    });
    if (traces.length) Plotly.newPlot("history-chart", traces, Object.assign({ yaxis: { title: "median latency (ms)", type: "log" } }, layout), { displaylogo: false });
    else document.getElementById("history-chart").textContent = "No timed benchmark yet.";
  }

  function bars(breakdown) {
    return Object.keys(breakdown || {}).map(function (mode) {
      var rows = breakdown[mode] || [];
      return { type: "bar", name: mode, x: rows.map(function (r) { return r.label; }), y: rows.map(function (r) { return r.ms; }),
               text: rows.map(function (r) { return r.workload + ", " + (100 * r.share).toFixed(1) + "%"; }) };
    });
  }
  var breakdown = data("breakdown-data");
  if (breakdown && document.getElementById("breakdown-chart")) {
    var t = bars(breakdown);
    if (t.length) Plotly.newPlot("breakdown-chart", t, Object.assign({ barmode: "group", yaxis: { title: "ms per call" } }, layout), { displaylogo: false });
    else document.getElementById("breakdown-chart").textContent = "No profile recorded yet.";
  }

  var cmp = data("compare-data");
  if (cmp && document.getElementById("compare-chart")) {
    var traces2 = [];
    ["a", "b"].forEach(function (side) {
      bars(cmp[side]).forEach(function (tr) { tr.name = side.toUpperCase() + " " + tr.name; traces2.push(tr); });
    });
    Plotly.newPlot("compare-chart", traces2, Object.assign({ barmode: "group", yaxis: { title: "ms per call" } }, layout), { displaylogo: false });
  }
})();
