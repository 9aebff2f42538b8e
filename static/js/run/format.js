// Number formatting for tables, hover texts and log lines.

// Four significant digits between 0.01 and 1e5, else exponent notation; "" for a missing value.
export function fmt(v) {
  if (v === undefined || v === null || Number.isNaN(v)) return "";
  if (typeof v !== "number") return String(v);
  const a = Math.abs(v);
  return a === 0 ? "0" : a >= 0.01 && a < 1e5 ? v.toPrecision(4) : v.toExponential(2);
}

// A finite number, or null (metrics arrive as numbers, null, or non-finite values).
export const finite = (v) => (typeof v === "number" && isFinite(v) ? v : null);

// Text for a Plotly hover or label, which reads <a>, <span style> and the like as markup:
// names and labels come from engineers and recorded files, so &, < and > are escaped.
export const plotText = (s) => String(s).replace(/[&<>]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;" })[c]);
