"""The main pages at 1024 x 768 in real Chromium: nothing wider than the window or than its
panel, and no chart legend over an axis title. A screenshot of each page."""

import os

import pytest

from tests.integration.screenshots import full_page_png
from tests.integration.test_browser import SHOTS, Watched, browser  # noqa: F401  (the browser fixture)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

WIDTH, HEIGHT = 1024, 768

# Elements wider than their box (scrollWidth > clientWidth) and charts whose legend box meets
# an axis title's box; [] each when the page holds at 1024 px.
MEASURE = """() => {
  const se = document.scrollingElement;
  const out = {page: [se.scrollWidth, se.clientWidth], panels: [], legends: [], pairs: 0};
  const name = (el) => el.id ? '#' + el.id : (el.tagName.toLowerCase() + '.' + [...el.classList].join('.')
      + (el.closest('[id]') ? ' in #' + el.closest('[id]').id : ''));
  for (const el of document.querySelectorAll('main, .card, section, .two-col, header, .status-bar, details')) {
    if (el.scrollWidth > el.clientWidth + 1) out.panels.push([name(el), el.scrollWidth, el.clientWidth]);
  }
  const meets = (a, b) => a.width > 0 && b.width > 0 && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
  for (const plot of document.querySelectorAll('.js-plotly-plot')) {
    const legend = plot.querySelector('g.legend');
    if (!legend) continue;
    const lb = legend.getBoundingClientRect();
    for (const t of plot.querySelectorAll('g.infolayer [class$="title"] text, .xtitle, .ytitle, [class*="xtitle"], [class*="ytitle"]')) {
      const tb = t.getBoundingClientRect();
      out.pairs += 1;
      if (meets(lb, tb)) out.legends.push([plot.id, t.getAttribute('class') || t.parentNode.getAttribute('class'), t.textContent]);
    }
  }
  return out;
}"""


def _seed(user):
    """A finished run with evaluated candidates and agents, a promotion, and an engine with a
    benchmark history: every main page has content and its charts."""
    import random

    from django.contrib.auth import get_user_model

    from swarm.engine_registry.models import EngineBenchmark, ProductionEngine
    from swarm.goals.lifecycle import default_goal
    from swarm.models import AgentRecord, Candidate, Evidence, Generation, Promotion, Run

    owner = get_user_model().objects.get(username=user)
    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", user=owner, name="layout at 1024 px")
    run = Run.objects.create(goal=goal, budget=60, batch_size=6, seed=1, space=goal.space, state=Run.State.FINISHED,
                             constraints=goal.constraints, generation=10, created_by=owner)
    agents = [("forest", "forest"), ("gp", "gp"), ("evolutionary-long-name", "evolutionary"), ("local", "local")]
    for name, kind in agents:
        AgentRecord.objects.create(run=run, name=name, kind=kind, evaluations=15, improvements=3, last_share=2,
                                   score=0.123456, failed_proposals=1)
    for g in range(10):
        Generation.objects.create(run=run, number=g + 1, shares={a: 2 for a, _ in agents}, improvements={"gp": 1})
    rng = random.Random(3)
    names = [p["name"] for p in goal.space["parameters"]]
    cands = []
    for i in range(60):
        params = {n: rng.choice(p["values"]) for n, p in zip(names, goal.space["parameters"])}
        lat = rng.uniform(0.01, 0.05)
        c = Candidate.objects.create(goal=goal, run=run, generation=i // 6 + 1, agent=agents[i % 4][0],
                                     content_hash=f"{i:064x}", params=params, source=goal.source, status="ok")
        Evidence.objects.create(candidate=c, status="ok", samples_ms={"rows=1,hidden=256": [lat] * 5},
                                metrics={"latency_ms": lat, "max_rel_error": 10 ** rng.uniform(-8, -5),
                                         "gbps": 1 / lat, "roofline_pct": 20 + i / 3})
        cands.append(c)
    Promotion.objects.create(candidate=cands[0], workload=goal.workload, target=goal.target, shape_set=goal.shape_set,
                             promoted_by=owner)
    pe = ProductionEngine.objects.create(name="llama-layer-small/cpu-x86_64", engine="llama-layer", config="small")
    rows = [{"label": op, "workload": "gemm", "ms": 0.1 * (k + 1), "share": 0.1} for k, op in enumerate(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "attention"])]
    for k in range(3):
        EngineBenchmark.objects.create(engine=pe, label=f"benchmark {k}", metrics={"decode_ms": 1.0 + k, "prefill_ms": 5.0 + k},
                                       breakdown={"decode": rows, "prefill": rows})
    return goal, run, cands, pe


def _settle(page):
    """Wait until every Plotly chart on the page has drawn (and the run page its first draw)."""
    page.wait_for_load_state("load")
    if page.locator("#frontier-chart").count():
        page.wait_for_function("document.body.dataset.drawn === '1'", timeout=60_000)
    page.evaluate("""async () => {  // through the whole page: charts outside the window draw when they enter it
      for (let y = 0; y < document.scrollingElement.scrollHeight; y += 400) {
        window.scrollTo(0, y); await new Promise((r) => setTimeout(r, 60));
      }
      window.scrollTo(0, 0);
    }""")
    page.wait_for_function("[...document.querySelectorAll('.js-plotly-plot')].every((p) => p.querySelector('.main-svg'))",
                           timeout=60_000)
    page.wait_for_timeout(300)  # Plotly's responsive relayout after the first draw


def test_the_main_pages_hold_at_1024_px(stack, demo_user, browser):  # noqa: F811
    goal, run, cands, pe = _seed(demo_user[0])
    w = Watched(browser, stack)
    page = w.page
    page.set_viewport_size({"width": WIDTH, "height": HEIGHT})
    w.login(*demo_user)
    pages = {
        "goal_list": "/", "goal": f"/goals/{goal.pk}/", "run": f"/runs/{run.pk}/",
        "compare": f"/compare/?ids={cands[0].pk},{cands[1].pk},{cands[2].pk}", "candidate": f"/candidates/{cands[0].pk}/",
        "engines": "/engines/", "engine": f"/engines/{pe.pk}/", "production": "/production/",
    }
    problems, pairs = {}, {}
    for name, path in pages.items():
        page.goto(stack + path)
        _settle(page)
        m = page.evaluate(MEASURE)
        full_page_png(page, SHOTS / f"layout_1024_{name}.png")
        pairs[name] = m["pairs"]
        if m["page"][0] > m["page"][1] or m["panels"] or m["legends"]:
            problems[name] = m
    assert problems == {}, problems
    assert pairs["run"] >= 2 and pairs["compare"] >= 1, pairs  # legends and axis titles were found and compared
    w.check_clean()
