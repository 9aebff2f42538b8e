// Applies one run event ({event, data}: swarm/runs/events.py) to the page's data and marks what to
// redraw; its log lines come from log.js's describe(). Events before the snapshot are dropped
// (the snapshot includes them).
import { setupAxes } from "./axes.js";
import { setupSteering } from "./directions.js";
import { candidateLine, describe, log } from "./log.js";
import { schedule } from "./scheduler.js";
import { dirty, loadSnapshot, meta, setRunState, upsert } from "./state.js";

const SHARE_HISTORY = 300; // generations of budget shares kept, as the snapshot sends them

function logAll(msg) { for (const [text, cls] of describe(msg)) log(text, cls); }

function candidate(c) { if (upsert(c)) log(...candidateLine(c)); }

export function receive(msg) {
  const d = msg.data;
  if (msg.event === "snapshot") {
    loadSnapshot(d);
    setupAxes();
    setupSteering();
    logAll(msg);
  } else if (meta) {
    switch (msg.event) {
      case "candidate": candidate(d); break;
      case "candidates": d.items.forEach(candidate); break; // a generation's proposals, or a batch evaluated at once
      case "run": setRunState(d); logAll(msg); break;
      case "generation":
        meta.generations.push({ number: d.number, shares: d.shares, improvements: {} });
        if (meta.generations.length > SHARE_HISTORY) meta.generations.shift();
        for (const a of meta.agents) { a.share = d.shares[a.name] || 0; if (d.scores && a.name in d.scores) a.score = d.scores[a.name]; }
        meta.run.generation = d.number;
        dirty.agents = dirty.state = true;
        logAll(msg);
        break;
      case "generation_finished": {
        if (d.agents) meta.agents = d.agents;
        const g = meta.generations.find((g) => g.number === d.number);
        if (g) g.improvements = d.improvements;
        dirty.agents = true;
        logAll(msg);
        break;
      }
      case "insight":
        meta.insights = [d, ...meta.insights.filter((i) => i.id !== d.id)];
        dirty.insights = true;
        logAll(msg);
        break;
      case "direction": {
        const i = meta.directions.findIndex((x) => x.id === d.id);
        if (i >= 0) meta.directions[i] = d; else meta.directions.push(d);
        if (d.state === "applied" && d.effect && d.effect.constraints_after) {
          meta.constraints = d.effect.constraints_after;
          dirty.full = true;
        }
        dirty.directions = true;
        logAll(msg);
        break;
      }
      default: break;
    }
  }
  schedule();
}
