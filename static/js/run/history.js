// The event log's first lines: the run's stored events up to the snapshot (the last LOG_MAX of
// them), described without applying them (the snapshot includes their effect), so that a page
// opened or reloaded mid-run, or after the run, shows what happened before.
import { LOG_MAX, appendStored, log } from "./log.js";
import { storedEvents } from "./stream.js";

let loaded = false;

// Once per page: the events with seq in (seq - LOG_MAX, seq], seq the snapshot's.
export async function loadStoredLog(seq) {
  if (loaded || typeof seq !== "number" || seq <= 0) return;
  loaded = true;
  const events = [];
  try {
    for await (const page of storedEvents(Math.max(0, seq - LOG_MAX))) {
      events.push(...page.filter((e) => e.seq <= seq));
      if (page.length && page[page.length - 1].seq >= seq) break;
    }
  } catch (e) {
    log(`could not fetch the run's earlier events: ${e}`, "bad");
    return;
  }
  appendStored(events);
}
