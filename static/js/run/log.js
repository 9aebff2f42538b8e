// The event log: one line per event worth reading, newest first, at most LOG_MAX lines.
// Lines are queued as events arrive and put into the page once per redraw (flushLog).
import { $, el } from "./dom.js";
import { finite, fmt } from "./format.js";
import { PENDING, primary } from "./state.js";

export const LOG_MAX = 200;
const queue = [];

export function log(text, cls) {
  queue.push({ text, cls, at: new Date() });
  if (queue.length > LOG_MAX) queue.splice(0, queue.length - LOG_MAX);
}

export function flushLog() {
  if (!queue.length) return;
  const ol = $("event-log");
  const frag = document.createDocumentFragment();
  for (const e of queue.splice(0)) {
    frag.prepend(el("li", { class: e.cls || "" }, el("time", {}, e.at.toLocaleTimeString()), " ", e.text));
  }
  ol.prepend(frag);
  while (ol.children.length > LOG_MAX) ol.lastElementChild.remove();
}

// Lines from the run's stored events ({event, seq, data, at}, oldest first), below the lines
// already shown (the stored events precede them); the oldest go past LOG_MAX.
export function appendStored(events) {
  const ol = $("event-log");
  const frag = document.createDocumentFragment();
  for (const e of events) {
    const at = e.at ? new Date(e.at) : null;
    for (const [text, cls] of describe(e)) {
      frag.prepend(el("li", { class: `${cls} stored`.trim() }, el("time", { datetime: e.at || "" }, at ? at.toLocaleTimeString() : ""), " ", text));
    }
  }
  ol.append(frag);
  while (ol.children.length > LOG_MAX) ol.lastElementChild.remove();
}

// The line of a finished candidate ({id, status, agent, metrics}): [text, class].
export function candidateLine(c) {
  const ok = c.status === "ok";
  const m = primary().metric;
  return [`#${c.id} ${c.status}` + (ok ? ` ${m} ${fmt(finite((c.metrics || {})[m]))}` : "") + ` · ${c.agent}`, ok ? "" : "bad"];
}

// The lines of a run event ({event, data}) as [text, class] pairs, from the event alone: a
// candidate counts once it has finished (queued and running ones have no line).
export function describe(msg) {
  const d = msg.data;
  switch (msg.event) {
    case "snapshot": return [[`snapshot: ${d.columns.n} candidates`, ""]];
    case "candidate": return PENDING.has(d.status) ? [] : [candidateLine(d)];
    case "candidates": return d.items.filter((c) => !PENDING.has(c.status)).map(candidateLine);
    case "run": return [[`run ${d.state}, generation ${d.generation}`, ""]];
    case "generation":
      return [[`generation ${d.number}: shares ${Object.entries(d.shares).map(([k, v]) => `${k} ${v}`).join(", ")}`, ""]];
    case "generation_finished": {
      const imp = Object.entries(d.improvements || {}).filter(([, n]) => n > 0);
      return [[`generation ${d.number} finished` + (imp.length ? `: frontier improved by ${imp.map(([k, n]) => `${k} (${n})`).join(", ")}` : ""), ""]];
    }
    case "insight": return [[`insight: ${d.kind}` + (d.data && d.data.rule ? ` ${d.data.rule}` : ""), ""]];
    case "direction":
      return [[`direction ${d.kind} ${d.state}` + (d.effect && d.effect.rejected ? `: ${d.effect.rejected}` : ""), d.state === "rejected" ? "bad" : ""]];
    default: return [];
  }
}
