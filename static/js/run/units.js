// Units and significant digits of metrics and parameters, by the rules of swarm/web/display.py
// (unit_of, number, with_unit), which the page config carries (cfg.units).
import { cfg } from "./state.js";

const RULES = cfg.units || { suffixes: [], keys: {} };

// The unit of a metric or parameter name ("latency_ms[rows=32]" -> "ms"), or "".
export function unitOf(name) {
  const base = String(name).split("[", 1)[0];
  if (Object.prototype.hasOwnProperty.call(RULES.keys, base)) return RULES.keys[base];
  for (const [suffix, unit] of RULES.suffixes) if (base.endsWith(suffix)) return unit;
  return "";
}

// An axis title: the name and its unit, "latency_ms (ms)".
export const axisTitle = (name) => (unitOf(name) ? `${name} (${unitOf(name)})` : name);

// v with four significant digits (thousands kept whole, below 1e-3 in exponent notation),
// integers and non-numbers as they are; "" for a missing value.
export function number(v) {
  if (v === undefined || v === null || (typeof v === "number" && Number.isNaN(v))) return "";
  if (typeof v !== "number" || Number.isInteger(v) || !isFinite(v)) return String(v);
  const a = Math.abs(v);
  if (a >= 1e4) return v.toFixed(0);
  if (a < 1e-3) return v.toExponential(3);
  return String(Number(v.toPrecision(4)));
}

// v as number() followed by the unit of name ("0.1234 ms", "12%").
export function withUnit(name, v) {
  const text = number(v);
  const unit = unitOf(name);
  if (!unit || text === "" || typeof v !== "number") return text;
  return unit === "%" || unit === "×" ? `${text}${unit}` : `${text} ${unit}`;
}

// "name: value unit", for hover texts.
export const named = (name, v) => `${name}: ${withUnit(name, v) || "–"}`;
