// Production page: while promotion requests are validating, poll their state and reload the
// page when one is decided (the decision and its reason then show in place).
(function () {
  "use strict";
  const box = document.getElementById("validating");
  if (!box) return;
  const ids = box.dataset.ids.split(",").filter(Boolean);
  async function poll() {
    for (const id of ids) {
      try {
        const r = await fetch(box.dataset.url.replace("/0/", `/${id}/`), { headers: { Accept: "application/json" }, credentials: "same-origin" });
        const d = await r.json();
        if (d.state !== "validating") { location.reload(); return; }
      } catch (e) { /* try again */ }
    }
    setTimeout(poll, 2000);
  }
  setTimeout(poll, 2000);
})();
