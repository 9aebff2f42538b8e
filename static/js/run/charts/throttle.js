// Charts drawn only while in view (or about to be), and at most once every gap ms while
// candidates stream in: request() marks the chart stale and draws it when due. The time of
// each draw (until Plotly resolves) goes to timings.parts[id], for the benchmark.
import { $ } from "../dom.js";
import { timings } from "../scheduler.js";

export function throttledChart(id, draw, gapMs = 750) {
  const s = { visible: false, stale: true, drawnAt: 0, timer: null };
  function request(now = false) {
    s.stale = true;
    if (!s.visible || (s.timer !== null && !now)) return; // the draw already due includes this change
    clearTimeout(s.timer);
    s.timer = setTimeout(() => {
      s.timer = null;
      if (!s.stale) return;
      s.stale = false;
      s.drawnAt = Date.now();
      const t0 = performance.now();
      Promise.resolve(draw()).then(() => { timings.parts[id] = performance.now() - t0; });
    }, now ? 0 : Math.max(0, s.drawnAt + gapMs - Date.now()));
  }
  new IntersectionObserver((entries) => {
    s.visible = entries.some((e) => e.isIntersecting);
    if (s.visible && s.stale) request();
  }, { rootMargin: "200px" }).observe($(id));
  return request;
}
