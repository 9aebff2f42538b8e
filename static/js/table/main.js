// The candidate table page: the query string is the API's (/api/runs/<id>/table/:
// columns, sort, status, agent, range.<column>=lo..hi, limit, offset); the form and the headings
// change it, the page fetches one page of rows and shows them. The database sorts, filters and
// cuts, so a 50,000-candidate run costs one page of rows.
const cfg = JSON.parse(document.getElementById("table-config").textContent);
const $ = (id) => document.getElementById(id);
const RANGE = "range.";
let last = null; // the latest good response
let token = 0; // the latest request (answers to older ones are dropped)

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) {
    if (k === "class") e.className = attrs[k];
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), attrs[k]);
    else if (attrs[k] !== false && attrs[k] !== undefined && attrs[k] !== null) e.setAttribute(k, attrs[k] === true ? "" : attrs[k]);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}

const params = () => new URLSearchParams(location.search);
const list = (p, key) => (p.get(key) || "").split(",").map((s) => s.trim()).filter(Boolean);

async function load(p) {
  const mine = ++token;
  history.replaceState(null, "", p.toString() ? `?${p}` : location.pathname);
  $("page-info").textContent = "loading…";
  document.body.dataset.loaded = "";
  const r = await fetch(`${cfg.apiUrl}?${p}`, { headers: { Accept: "application/json" }, credentials: "same-origin" });
  const body = await r.json().catch(() => ({ detail: [`HTTP ${r.status}`] }));
  if (mine !== token) return;
  const err = $("table-error");
  if (!r.ok) {
    err.hidden = false;
    err.textContent = Object.entries(body).map(([k, v]) => `${k}: ${[].concat(v).join(" ")}`).join("; ");
    $("page-info").textContent = "";
    document.body.dataset.loaded = "error";
    return;
  }
  err.hidden = true; err.textContent = "";
  last = body;
  renderFilters(p);
  renderTable();
  document.body.dataset.loaded = "1";
}

// --- the form ------------------------------------------------------------------------------------

function checks(box, name, values, chosen) {
  box.replaceChildren(...values.map((v) => el("label", {}, el("input", { type: "checkbox", name, value: v, checked: chosen.includes(v) }), ` ${v}`)));
}

function rangeRow(name, lo, hi) {
  const numeric = last.available.filter((c) => c.numeric);
  const sel = el("select", { class: "range-col" }, ...numeric.map((c) => el("option", { value: c.name, selected: c.name === name }, c.unit ? `${c.name} (${c.unit})` : c.name)));
  const row = el("div", { class: "range-row" }, sel,
    el("input", { class: "range-lo", placeholder: "min", value: lo, "aria-label": "minimum" }), "…",
    el("input", { class: "range-hi", placeholder: "max", value: hi, "aria-label": "maximum" }),
    el("button", { type: "button", class: "small secondary", onclick: () => row.remove(), title: "remove this range" }, "×"));
  return row;
}

function renderFilters(p) {
  checks($("f-status"), "status", last.statuses, list(p, "status"));
  checks($("f-agent"), "agent", last.agents, list(p, "agent"));
  const shown = last.columns.map((c) => c.name);
  checks($("f-columns"), "column", last.available.map((c) => c.name), shown);
  $("n-columns").textContent = String(shown.length);
  const rows = [];
  for (const [k, v] of p) if (k.startsWith(RANGE)) { const [lo, hi] = v.split(".."); rows.push(rangeRow(k.slice(RANGE.length), lo || "", hi || "")); }
  $("f-ranges").replaceChildren(...rows);
  $("page-size").value = String(last.limit);
}

// The query string from the form (sort and page size kept; back to the first page).
function fromForm() {
  const p = new URLSearchParams();
  const picked = (name) => [...document.querySelectorAll(`#table-filters input[name=${name}]:checked`)].map((i) => i.value);
  const cols = picked("column");
  if (cols.length && cols.join(",") !== last.default.join(",")) p.set("columns", cols.join(","));
  const cur = params();
  if (cur.get("sort")) p.set("sort", cur.get("sort"));
  for (const key of ["status", "agent"]) { const v = picked(key); if (v.length) p.set(key, v.join(",")); }
  for (const row of document.querySelectorAll("#f-ranges .range-row")) {
    const lo = row.querySelector(".range-lo").value.trim(), hi = row.querySelector(".range-hi").value.trim();
    if (lo || hi) p.set(RANGE + row.querySelector(".range-col").value, `${lo}..${hi}`);
  }
  if ($("page-size").value !== "50") p.set("limit", $("page-size").value);
  return p;
}

// --- the table -----------------------------------------------------------------------------------

function sortKeys() { return last.sort.map((s) => ({ name: s.replace(/^-/, ""), desc: s.startsWith("-") })); }

function onHeading(ev, name) {
  let keys = sortKeys();
  const i = keys.findIndex((k) => k.name === name);
  if (ev.shiftKey) {
    if (i >= 0) keys[i].desc = !keys[i].desc; else keys.push({ name, desc: false });
  } else keys = [{ name, desc: i === 0 ? !keys[0].desc : false }];
  const p = params();
  p.set("sort", keys.map((k) => (k.desc ? "-" : "") + k.name).join(","));
  p.delete("offset");
  load(p);
}

function renderTable() {
  const keys = sortKeys();
  const head = last.columns.map((c) => {
    const k = keys.findIndex((s) => s.name === c.name);
    const cls = ["sortable", c.numeric ? "num" : "", k >= 0 ? (keys[k].desc ? "sorted-desc" : "sorted-asc") : ""].join(" ").trim();
    return el("th", { class: cls, "data-column": c.name, title: `${c.kind}${c.unit ? `, in ${c.unit}` : ""}: click to sort`, onclick: (ev) => onHeading(ev, c.name) },
      c.name, c.unit ? el("span", { class: "unit" }, ` (${c.unit})`) : null, k >= 0 && keys.length > 1 ? el("span", { class: "key" }, ` ${k + 1}`) : null);
  });
  $("candidate-table").tHead.rows[0].replaceChildren(...head);
  const body = last.rows.map((r) => el("tr", { "data-id": r.id }, ...last.columns.map((c) => {
    const text = r.text[c.name];
    let content = text;
    if (c.name === "id") content = el("a", { href: cfg.candidateUrl.replace("/0/", `/${r.id}/`) }, `#${r.id}`);
    else if (c.name === "status") content = el("span", { class: `badge status-${text}` }, text);
    return el("td", { class: c.numeric && c.name !== "id" ? "num" : "", "data-column": c.name }, content);
  })));
  if (!body.length) body.push(el("tr", {}, el("td", { colspan: last.columns.length, class: "hint" }, "No candidate matches these filters.")));
  $("candidate-table").tBodies[0].replaceChildren(...body);
  const from = last.count ? last.offset + 1 : 0, to = last.offset + last.rows.length;
  $("page-info").textContent = `rows ${from}–${to} of ${last.count}`;
  $("page-first").disabled = $("page-prev").disabled = last.offset === 0;
  $("page-next").disabled = $("page-last").disabled = to >= last.count;
}

function goTo(offset) {
  const p = params();
  if (offset > 0) p.set("offset", String(offset)); else p.delete("offset");
  load(p);
}

$("table-filters").addEventListener("submit", (ev) => { ev.preventDefault(); load(fromForm()); });
$("add-range").addEventListener("click", () => { if (last) $("f-ranges").append(rangeRow(last.available.find((c) => c.kind === "metric")?.name, "", "")); });
$("clear-filters").addEventListener("click", () => {
  const p = params();
  for (const k of [...p.keys()]) if (k !== "columns" && k !== "sort" && k !== "limit") p.delete(k);
  load(p);
});
$("default-columns").addEventListener("click", () => { const p = params(); p.delete("columns"); load(p); });
$("page-size").addEventListener("change", () => { const p = params(); p.set("limit", $("page-size").value); p.delete("offset"); load(p); });
$("page-first").addEventListener("click", () => goTo(0));
$("page-prev").addEventListener("click", () => goTo(Math.max(0, last.offset - last.limit)));
$("page-next").addEventListener("click", () => goTo(last.offset + last.limit));
$("page-last").addEventListener("click", () => goTo(Math.max(0, Math.floor((last.count - 1) / last.limit) * last.limit)));

load(params());
