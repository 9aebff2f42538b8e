// Steering: the direction form (its fields follow the kind; parameters, agents and metrics come
// from the snapshot), accepting a suggested restriction, the list of the run's directions, and
// the stop button. All post with fetch (the page and its event log stay) and show the server's
// refusal in place; without the script the forms post and the page reloads.
import { $, el } from "./dom.js";
import { log } from "./log.js";
import { schedule } from "./scheduler.js";
import { C, cfg, dirty, meta, setRunState } from "./state.js";

function csrf() {
  const input = document.querySelector("input[name=csrfmiddlewaretoken]");
  return input ? input.value : "";
}

// POSTs a direction form; the recorded direction joins the list. Returns whether it was recorded.
async function post(url, body, errorEl, button) {
  errorEl.textContent = "";
  if (button) button.disabled = true;
  try {
    const resp = await fetch(url, { method: "POST", body, headers: { Accept: "application/json", "X-CSRFToken": csrf() }, credentials: "same-origin" });
    const data = await resp.json().catch(() => ({ ok: false, error: `HTTP ${resp.status}` }));
    if (!data.ok) { errorEl.textContent = data.error || `HTTP ${resp.status}`; return false; }
    const d = data.direction;
    if (!meta.directions.some((x) => x.id === d.id)) meta.directions.push(d);
    dirty.directions = true;
    log(`direction ${d.kind} submitted: ${JSON.stringify(d.payload)}`);
    schedule();
    return true;
  } catch (e) {
    errorEl.textContent = `could not submit: ${e}`;
    return false;
  } finally {
    if (button) button.disabled = false;
  }
}

export async function accept(insightId, btn) {
  const ok = await post(cfg.acceptUrl.replace("/0/", `/${insightId}/`), new FormData(), $("insight-error"), btn);
  if (ok) { btn.textContent = "Accepted"; btn.disabled = true; }
}

// The form's choices from the snapshot: parameters of the space, agents, metrics.
export function setupSteering() {
  const params = (meta.space.parameters || []).map((p) => p.name);
  const paramSel = document.querySelector("#direction-form select[name=param]");
  if (paramSel) {
    paramSel.replaceChildren(...params.map((n) => el("option", { value: n }, n)));
    paramSel.dispatchEvent(new Event("change"));
  }
  const agentSel = document.querySelector("#direction-form select[name=agent]");
  if (agentSel) agentSel.replaceChildren(...meta.agents.map((a) => el("option", { value: a.name }, a.name)));
  const metricSel = document.querySelector("#direction-form select[name=metric]");
  if (metricSel) {
    const names = [...new Set([...Object.keys(C.metrics), ...meta.constraints.map((c) => c.metric)])];
    metricSel.replaceChildren(...names.map((n) => el("option", { value: n }, n)));
  }
}

export function initSteering() {
  const form = $("direction-form");
  if (!form) return;
  const kindSel = form.querySelector("select[name=kind]");
  const showFields = () => form.querySelectorAll("[data-kinds]").forEach((e) => {
    e.hidden = !e.dataset.kinds.split(" ").includes(kindSel.value);
  });
  kindSel.addEventListener("change", showFields);
  showFields();
  const paramSel = form.querySelector("select[name=param]");
  paramSel.addEventListener("change", () => {
    const p = meta && (meta.space.parameters || []).find((x) => x.name === paramSel.value);
    $("param-values").textContent = !p ? "" : p.labels ? `values (by label): ${p.labels.join(", ")}` : `values: ${p.values.join(", ")}`;
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    await post(form.action, new FormData(form), $("direction-error"), form.querySelector("button[type=submit]"));
  });
}

// "Stop run now": the run's new state comes back and is shown at once (its "run" event follows).
export function initStop() {
  const form = $("stop-form");
  if (!form) return;
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const button = form.querySelector("button[type=submit]"), errorEl = $("stop-error");
    errorEl.textContent = "";
    button.disabled = true;
    try {
      const resp = await fetch(form.action, { method: "POST", body: new FormData(form), credentials: "same-origin",
                                              headers: { Accept: "application/json", "X-CSRFToken": csrf() } });
      const data = await resp.json().catch(() => ({ ok: false, error: `HTTP ${resp.status}` }));
      if (!data.ok) { errorEl.textContent = data.error || data.detail || `HTTP ${resp.status}`; return; }
      if (meta) { setRunState(data.run); schedule(); }
    } catch (e) {
      errorEl.textContent = `could not stop: ${e}`;
    } finally {
      button.disabled = false;
    }
  });
}

export function renderDirections() {
  $("directions-list").replaceChildren(...meta.directions.slice().reverse().map((d) => el("li", {},
    el("span", { class: `badge dir-${d.state}` }, d.state), " ", el("code", {}, d.kind), " ",
    Object.keys(d.payload || {}).length ? el("code", {}, JSON.stringify(d.payload)) : "",
    d.author ? ` by ${d.author}` : "", d.applied_generation ? ` at generation ${d.applied_generation}` : "",
    d.effect && d.effect.rejected ? el("span", { class: "error" }, ` ${d.effect.rejected}`) : "",
    d.effect && d.effect.space_size_after !== undefined ? ` (space ${d.effect.space_size_before} → ${d.effect.space_size_after})` : "")));
}
