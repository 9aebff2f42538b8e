// Total constraint violation of one candidate, as swarm/runs/results.py computes it: over the
// constraints, the excess relative to the bound, max(0, m - v) / s for "<=" and
// max(0, v - m) / s for ">=", s = |v| (1 when v is 0); Infinity when a metric is missing.
(function (root) {
  "use strict";
  function totalViolation(constraints, value) { // value(metric) -> number or null
    let total = 0;
    for (const c of constraints) {
      const m = value(c.metric);
      if (m === null || m === undefined || typeof m !== "number" || !isFinite(m)) return Infinity;
      const gap = c.op === "<=" ? m - c.value : c.value - m;
      total += Math.max(0, gap) / (Math.abs(c.value) || 1);
    }
    return total;
  }
  root.totalViolation = totalViolation;
  if (typeof module !== "undefined") module.exports = { totalViolation };
})(typeof window !== "undefined" ? window : globalThis);
