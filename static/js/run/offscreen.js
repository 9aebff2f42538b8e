// Charts outside the window are drawn when they scroll into view: drawWhenVisible(id, draw)
// runs draw() now (returning its promise) while the element is in the window, or before its
// visibility is known; otherwise it keeps the latest draw and runs it once the element enters
// the window (a live batch then does not pay for a chart nobody sees).
const seen = new Map(); // id -> { visible: bool | null, draw: function | null }

function entry(id) {
  let e = seen.get(id);
  if (e) return e;
  e = { visible: null, draw: null };
  seen.set(id, e);
  const el = document.getElementById(id);
  if (el && window.IntersectionObserver) {
    new IntersectionObserver((changes) => {
      e.visible = changes[changes.length - 1].isIntersecting;
      if (e.visible && e.draw) { const d = e.draw; e.draw = null; d(); }
    }).observe(el);
  }
  return e;
}

export function drawWhenVisible(id, draw) {
  const e = entry(id);
  if (e.visible === false) { e.draw = draw; return null; }
  e.draw = null;
  return draw();
}
