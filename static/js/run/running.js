// The candidates being evaluated now: each with its elapsed time (ticking here from the
// started_at its worker's claim recorded) and, for engineers who may steer, a cancel button
// that posts to the run's cancel endpoint (the candidate's new state comes back and is shown at
// once; its "candidate" event follows).
import { $, el } from "./dom.js";
import { log } from "./log.js";
import { schedule } from "./scheduler.js";
import { cfg, inflight, paramText, running, upsert } from "./state.js";

function csrf() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  return input ? input.value : "";
}

function params(c) {
  return Object.entries(c.params || {}).map(([k, v]) => paramText(k, v)).join(" ");
}

export function elapsedText(startedAt, nowMs) {
  const s = Math.max(0, (nowMs - Date.parse(startedAt)) / 1000);
  return s < 60 ? `${s.toFixed(0)} s` : `${Math.floor(s / 60)} min ${String(Math.floor(s % 60)).padStart(2, "0")} s`;
}

async function cancel(id, button) {
  const errorEl = $("running-error");
  errorEl.textContent = "";
  button.disabled = true;
  try {
    const resp = await fetch(cfg.cancelUrl.replace("/0/cancel/", `/${id}/cancel/`), {
      method: "POST", credentials: "same-origin", headers: { Accept: "application/json", "X-CSRFToken": csrf() } });
    const data = await resp.json().catch(() => ({ ok: false, error: `HTTP ${resp.status}` }));
    if (!data.ok) { errorEl.textContent = data.error || `HTTP ${resp.status}`; button.disabled = false; return; }
    log(`#${id} cancelled`, "bad");
    upsert(data.candidate);
    schedule();
  } catch (e) {
    errorEl.textContent = `could not cancel: ${e}`;
    button.disabled = false;
  }
}

export function renderRunning() {
  const list = $("running-list");
  if (!list) return;
  const now = Date.now();
  const rows = [...inflight.values()].filter((c) => c.started_at);
  $("running-none").hidden = rows.length > 0;
  list.replaceChildren(...rows.map((c) => el("li", { "data-candidate": c.id },
    el("a", { href: cfg.candidateUrl.replace("/0/", `/${c.id}/`) }, `#${c.id}`),
    ` gen ${c.generation} · ${c.agent} · `, el("code", {}, params(c)), " · running for ",
    el("strong", { class: "elapsed", title: `claimed at ${c.started_at}` }, elapsedText(c.started_at, now)), " ",
    cfg.canSteer && running()
      ? el("button", { type: "button", class: "small secondary cancel", onclick: (ev) => cancel(c.id, ev.currentTarget) }, "Cancel")
      : null)));
}

export function initRunning() {
  renderRunning();
}
