// Engines page: while a plan tuning or a benchmark is queued or running, reload every
// data-refresh-s seconds to show its progress and result, unless the register form has been
// edited (a reload would lose what was typed) or has the focus.
(function () {
  "use strict";
  document.addEventListener("DOMContentLoaded", function () {
    var h = document.getElementById("engines-heading");
    var every = h && Number(h.dataset.refreshS);
    if (!every) return;
    var form = document.getElementById("register-form");
    var edited = false;
    if (form) form.addEventListener("input", function () { edited = true; });
    setInterval(function () {
      var busy = form && form.contains(document.activeElement);
      if (!edited && !busy) window.location.reload();
    }, every * 1000);
  });
})();
