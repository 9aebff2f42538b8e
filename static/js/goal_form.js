// Goal form: a design-space editor (rows of parameter name + values, kept in sync with the
// "parameters" text field), shape sets filtered by workload, and a live server-side check of
// the space (errors in place, space size, template preview) as the engineer types.
(function () {
  "use strict";
  const form = document.getElementById("goal-form");
  const $ = (sel) => form.querySelector(sel);
  const params = $("textarea[name=parameters]");
  const tbody = document.querySelector("#space-editor tbody");
  const csrf = $("input[name=csrfmiddlewaretoken]").value;
  let timer = null;
  let seq = 0;

  function parse(text) {
    return text.split("\n").map((l) => l.trim()).filter(Boolean).map((l) => {
      const i = l.indexOf(":");
      return i < 0 ? { name: l, values: "" } : { name: l.slice(0, i).trim(), values: l.slice(i + 1).trim() };
    });
  }
  function serialize() {
    params.value = [...tbody.rows].map((tr) => {
      const [n, v] = tr.querySelectorAll("input");
      return `${n.value.trim()}: ${v.value.trim()}`;
    }).filter((l) => l !== ":").join("\n");
    scheduleCheck();
  }
  function row(p) {
    const tr = document.createElement("tr");
    const name = Object.assign(document.createElement("input"), { value: p.name, placeholder: "NAME", className: "name" });
    const values = Object.assign(document.createElement("input"), { value: p.values, placeholder: "1, 2, 4", className: "values" });
    const del = Object.assign(document.createElement("button"), { type: "button", className: "small secondary", textContent: "Remove", title: "remove this parameter" });
    name.setAttribute("aria-label", "parameter name");
    values.setAttribute("aria-label", "parameter values");
    name.addEventListener("input", serialize);
    values.addEventListener("input", serialize);
    del.addEventListener("click", () => { tr.remove(); serialize(); });
    for (const e of [name, values, del]) { const td = document.createElement("td"); td.append(e); tr.append(td); }
    return tr;
  }
  function renderRows() { tbody.replaceChildren(...parse(params.value).map(row)); }
  document.getElementById("add-param").addEventListener("click", () => {
    const tr = row({ name: "", values: "" });
    tbody.append(tr);
    tr.querySelector("input").focus();
  });
  params.addEventListener("change", () => { renderRows(); scheduleCheck(); });
  params.addEventListener("input", scheduleCheck);

  // shape sets of the chosen workload only
  const workload = $("select[name=workload]"), shapeSet = $("select[name=shape_set]");
  function filterShapeSets() {
    // shape set names repeat across workloads (test-small): keep the chosen name if this
    // workload has it, else its first set
    const want = shapeSet.value;
    let keep = null, first = null;
    for (const o of shapeSet.options) {
      const show = o.dataset.workload === workload.value;
      o.hidden = !show;
      o.disabled = !show;
      if (show && !first) first = o;
      if (show && o.value === want && !keep) keep = o;
    }
    if (keep || first) (keep || first).selected = true;
  }
  // Defaults follow the selection: the name, space and template that are still the previous
  // selection's defaults are replaced by the new one's; what the engineer typed is kept.
  const target = $("select[name=target]"), nameInput = $("input[name=name]");
  const fields = {
    parameters: params, restrictions: $("textarea[name=restrictions]"), source: $("textarea[name=source]"),
  };
  const norm = (text) => String(text || "").replace(/\r\n/g, "\n").split("\n").map((l) => l.trim()).join("\n").trim();
  async function fetchDefaults() {
    const q = new URLSearchParams({ workload: workload.value, target: target.value, shape_set: shapeSet.value });
    const resp = await fetch(`${form.dataset.defaultsUrl}?${q}`, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    return resp.json();
  }
  let current = fetchDefaults().catch(() => ({})); // the defaults of the selection the page opened with
  async function followDefaults() {
    const before = await current;
    current = fetchDefaults().catch(() => ({}));
    const after = await current;
    if (after.error) { showErrors({ target: after.error }); return; }
    if (!nameInput.value.trim() || nameInput.value.trim() === (before.name || "")) nameInput.value = after.name;
    let spaceChanged = false;
    for (const [key, el] of Object.entries(fields)) {
      if (el.readOnly || el.disabled) continue;
      if (norm(el.value) === norm(before[key]) && norm(el.value) !== norm(after[key])) {
        el.value = after[key];
        spaceChanged = spaceChanged || key === "parameters";
      }
    }
    if (spaceChanged) renderRows();
    form.dataset.defaultsFor = `${workload.value}/${target.value}/${shapeSet.value}`;
    scheduleCheck();
  }
  workload.addEventListener("change", () => { filterShapeSets(); scheduleCheck(); followDefaults(); });
  target.addEventListener("change", () => { scheduleCheck(); followDefaults(); });
  shapeSet.addEventListener("change", followDefaults);
  filterShapeSets();

  const loadDefaults = document.getElementById("load-defaults");
  if (loadDefaults) {
    loadDefaults.addEventListener("click", async () => {
      current = fetchDefaults();
      const data = await current;
      if (data.error) { showErrors({ target: data.error }); return; }
      params.value = data.parameters;
      fields.restrictions.value = data.restrictions;
      fields.source.value = data.source;
      renderRows();
      scheduleCheck();
    });
  }
  for (const name of ["restrictions", "source"]) $(`textarea[name=${name}]`).addEventListener("input", scheduleCheck);

  function showErrors(errors) {
    for (const field of ["parameters", "restrictions", "target"]) {
      const msg = errors[field] || "";
      form.querySelectorAll(`[data-error-for=${field}]`).forEach((p) => { p.textContent = msg; });
      const box = document.getElementById(`field-${field}`);
      if (box) box.classList.toggle("has-error", Boolean(msg));
    }
    const live = form.querySelector("[data-error-for=parameters-live]");
    live.textContent = errors.parameters || "";
  }

  function scheduleCheck() {
    clearTimeout(timer);
    timer = setTimeout(check, 300);
  }
  async function check() {
    const mine = ++seq;
    const body = new FormData();
    for (const name of ["parameters", "restrictions", "source"]) body.append(name, $(`textarea[name=${name}]`).value);
    body.append("workload", workload.value);
    body.append("target", $("select[name=target]").value);
    let data;
    try {
      const resp = await fetch(form.dataset.checkUrl, { method: "POST", body, credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRFToken": csrf } });
      data = await resp.json();
    } catch (e) {
      document.getElementById("space-size").textContent = `could not check: ${e}`;
      return;
    }
    if (mine !== seq) return; // a newer check is on its way
    showErrors(data.errors || {});
    const size = data.size;
    document.getElementById("space-size").textContent = size
      ? `${size.valid.toLocaleString()}${size.exact ? "" : " (estimated)"} valid of ${size.cartesian.toLocaleString()} points`
      : "—";
    if (data.preview !== undefined) document.getElementById("preview").innerHTML = data.preview;
    form.dataset.checked = String(mine);
  }

  renderRows();
  check();
})();
