"""The views engineers expect, in real Chromium against the real processes: the full candidate
table (server-side sorting, filters, pages, column choice), the optimization history, any
metric or parameter on either axis coloured by a parameter, parameter importance as a chart;
hovers name each metric with its unit."""

import os
import re

import pytest

from benchmarks.run_page import BENCH_SPACE, populate
from tests.integration.test_browser import Watched, _best_table_heads, _watch_run, browser  # noqa: F401  (the browser fixture)
from tests.integration.test_browser_workbench import _evaluated

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")


def _synthetic_run(n: int, name: str = "views", space: dict = BENCH_SPACE):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name=name)
    goal.space = space
    goal.save(update_fields=["space"])
    return populate(goal, n, seed=7, batch_size=20, state="finished")


def _numbers(page, column: str) -> list[float | None]:
    texts = page.eval_on_selector_all(f"#candidate-table tbody td[data-column='{column}']", "(tds) => tds.map((t) => t.textContent)")
    return [float(t.split()[0]) if t.strip() else None for t in texts]


def _loaded(page) -> None:
    page.wait_for_function("document.body.dataset.loaded === '1' || document.body.dataset.loaded === 'error'")


def test_the_candidate_table_sorts_filters_pages_and_chooses_columns(stack, demo_user, browser):  # noqa: F811
    run = _synthetic_run(300)
    lats = sorted(run.candidates.filter(status="ok").values_list("evidence__latency_ms", flat=True))
    thr = round(lats[len(lats) // 3], 2)
    ok_fast = run.candidates.filter(status="ok", evidence__latency_ms__lte=thr).count()
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    page.goto(f"{stack}/runs/{run.pk}/")
    page.click("#all-candidates")
    page.wait_for_url(re.compile(rf".*/runs/{run.pk}/candidates/$"))
    _loaded(page)
    assert page.inner_text("#page-info") == "rows 1–50 of 300"
    assert page.locator("#candidate-table tbody tr").count() == 50
    heads = page.eval_on_selector_all("#candidate-table thead th", "(ths) => ths.map((t) => t.textContent)")
    assert "latency_ms (ms)" in heads and "gbps (GB/s)" in heads and "BLOCK" in heads, heads

    # sort by latency: ascending, then descending, by the server (missing values last)
    page.click("#candidate-table th[data-column=latency_ms]")
    page.wait_for_url(re.compile(r".*sort=latency_ms"))
    _loaded(page)
    lat = [v for v in _numbers(page, "latency_ms") if v is not None]
    assert len(lat) > 30 and lat == sorted(lat)
    assert page.get_attribute("#candidate-table th[data-column=latency_ms]", "class").endswith("sorted-asc")
    page.click("#candidate-table th[data-column=latency_ms]")
    page.wait_for_url(re.compile(r".*sort=-latency_ms"))
    _loaded(page)
    lat = _numbers(page, "latency_ms")
    assert lat == sorted(lat, reverse=True) and lat[0] > thr

    # pages
    page.click("#page-next")
    page.wait_for_function("document.getElementById('page-info').textContent === 'rows 51–100 of 300'")
    assert max(v for v in _numbers(page, "latency_ms") if v is not None) <= lat[-1]

    # filters: status ok, latency at most thr ms; a column left out
    page.check("#f-status input[value=ok]")
    page.click("#add-range")
    page.select_option("#f-ranges .range-row:last-child .range-col", "latency_ms")
    page.fill("#f-ranges .range-row:last-child .range-hi", str(thr))
    page.click("#column-choice summary")
    page.uncheck("#f-columns input[value=BLOCK]")
    page.click("#table-filters button[type=submit]")
    page.wait_for_url(re.compile(r".*range\.latency_ms=\.\." + re.escape(str(thr))))
    _loaded(page)
    assert page.inner_text("#page-info") == f"rows 1–{min(50, ok_fast)} of {ok_fast}"
    assert set(page.eval_on_selector_all("#candidate-table tbody td[data-column=status]", "(t) => t.map((x) => x.textContent)")) == {"ok"}
    assert all(v <= thr for v in _numbers(page, "latency_ms"))
    assert page.locator("#candidate-table th[data-column=BLOCK]").count() == 0
    assert "columns=" in page.url and "BLOCK" not in page.url.split("columns=")[1].split("&")[0]
    page.click("#candidate-table tbody tr:first-child a")
    page.wait_for_url(re.compile(r".*/candidates/\d+/$"))
    page.go_back()
    _loaded(page)
    assert page.inner_text("#page-info") == f"rows 1–{min(50, ok_fast)} of {ok_fast}"  # the query string kept it
    w.shot("candidate_table")

    # bad input: the reason, from the API
    page.goto(f"{stack}/runs/{run.pk}/candidates/?range.latency_ms=3..1")
    _loaded(page)
    assert "range.latency_ms: empty range: 3 > 1" in page.inner_text("#table-error")
    page.goto(f"{stack}/runs/{run.pk}/candidates/?columns=id,speed")
    _loaded(page)
    assert "unknown column 'speed'" in page.inner_text("#table-error")
    w.shot("candidate_table_bad_input")
    w.check_clean()


def _chart(page, chart_id: str) -> dict:
    """The public data and layout of a Plotly chart: traces' x, y, text, hovertemplate, marker
    colour bar title; the axis titles."""
    return page.evaluate("""(id) => {
        const gd = document.getElementById(id);
        const t = (a) => a && a.title && (a.title.text ?? a.title);
        return {traces: gd.data.map((d) => ({name: d.name, x: Array.from(d.x || []), y: Array.from(d.y || []), text: d.text,
                                         hovertemplate: d.hovertemplate, colorbar: d.marker && d.marker.colorbar && t(d.marker.colorbar)})),
                x: t(gd.layout.xaxis), y: t(gd.layout.yaxis)};
    }""", chart_id)


def _hover_text(page, chart_id: str, x: float, y: float) -> str:
    """Moves the mouse over the point (x, y) of a chart with linear axes; the hover label's text."""
    box = page.locator(f"#{chart_id} .nsewdrag").first.bounding_box()
    ranges = page.evaluate("(id) => { const l = document.getElementById(id).layout; return [l.xaxis.range, l.yaxis.range]; }", chart_id)
    (x0, x1), (y0, y1) = ranges
    px = box["x"] + (x - x0) / (x1 - x0) * box["width"]
    py = box["y"] + box["height"] - (y - y0) / (y1 - y0) * box["height"]
    page.mouse.move(px, py)
    page.wait_for_selector(f"#{chart_id} .hoverlayer .hovertext", timeout=10_000)
    return page.eval_on_selector(f"#{chart_id} .hoverlayer .hovertext",
                                 "(g) => [...g.querySelectorAll('tspan.line')].map((t) => t.textContent).join('\\n') || g.textContent")


def test_a_labelled_parameter_reads_as_its_labels_on_the_run_page_and_in_the_table(stack, demo_user, browser):  # noqa: F811
    labels = ["static", "dynamic", '<a href="/x">guided</a>']  # a label is text, also in a chart's hover
    space = {**BENCH_SPACE, "parameters": [{**p, "labels": labels} if p["name"] == "SCHED" else p
                                           for p in BENCH_SPACE["parameters"]]}
    run = _synthetic_run(60, name="labelled", space=space)
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    _watch_run(w, f"{stack}/runs/{run.pk}/")
    shown = page.eval_on_selector_all("#best-table tbody td code", "(cs) => cs.map((c) => c.textContent)")
    assert shown and all(re.search(r'\bSCHED=(static|dynamic|<a href="/x">guided</a>)', t) for t in shown), shown
    page.locator("#history-chart").scroll_into_view_if_needed()
    page.wait_for_function("(document.getElementById('history-chart').dataset.points || '0') !== '0'", timeout=30_000)
    hovers = [t for trace in _chart(page, "history-chart")["traces"] for t in trace["text"] or []]
    assert any("SCHED=&lt;a href=\"/x\"&gt;guided&lt;/a&gt;" in t for t in hovers), hovers[:5]
    assert not any("<a" in t for t in hovers)
    # a chart's axis over the parameter reads as its labels too (escaped: tick text is markup to Plotly)
    escaped = ["static", "dynamic", '&lt;a href="/x"&gt;guided&lt;/a&gt;']
    page.locator("#scatter-chart").scroll_into_view_if_needed()
    page.wait_for_function("Number(document.getElementById('scatter-chart').dataset.points) > 0", timeout=30_000)
    page.select_option("#sc-x", "p:SCHED")
    page.wait_for_function("(document.getElementById('scatter-chart').layout.xaxis.ticktext || []).length === 3")
    assert page.evaluate("document.getElementById('scatter-chart').layout.xaxis.ticktext") == escaped
    page.locator("#parcoords-chart").scroll_into_view_if_needed()
    page.wait_for_function("(document.getElementById('parcoords-chart').data || []).length === 1", timeout=30_000)
    dims = page.evaluate("document.getElementById('parcoords-chart').data[0].dimensions.map((d) => [d.label, d.ticktext || null])")
    assert ["SCHED", escaped] in dims, dims
    page.goto(f"{stack}/runs/{run.pk}/candidates/?sort=SCHED")
    _loaded(page)
    cells = page.eval_on_selector_all("#candidate-table tbody td[data-column='SCHED']", "(tds) => tds.map((t) => t.textContent)")
    assert cells and set(cells) <= set(labels) and cells == sorted(cells, key=labels.index), cells
    w.check_clean()


def test_a_run_on_recorded_scores_marks_its_highest_score_best(stack, demo_user, browser, tmp_path):  # noqa: F811
    """A goal that maximises a recorded score has no latency and no throughput: its best table
    marks the top row best (not every row, as equal missing latencies did), without a GB/s
    column or the latency noise-floor note."""
    import json

    from swarm.goals.replay import import_cache
    from swarm.runs import orchestrator

    path = tmp_path / "browser_scores.json"
    path.write_text(json.dumps({"tune_params_keys": ["a", "b"], "tune_params": {"a": list(range(6)), "b": list(range(4))},
                                "objective": "score", "cache": {f"{a},{b}": {"a": a, "b": b, "score": 0.4 - 0.1 * abs(a - 3) - 0.05 * b}
                                                                for a in range(6) for b in range(4)}}))
    goal, _ = import_cache(path)
    run, pending = orchestrator.start_run(goal, budget=24, seed=3, batch_size=8, agents=[{"name": "random", "kind": "random", "settings": {}}])
    while pending:
        orchestrator.evaluate_batch([c.pk for c in pending])
        pending = orchestrator.advance(run.pk)
    w, heads = _best_table_heads(browser, stack, demo_user, run.pk)
    page = w.page
    assert "score" in heads and "GB/s" not in heads, heads
    ties = page.eval_on_selector_all("#best-table tbody td.tie", "(tds) => tds.map((t) => t.textContent)")
    assert ties[0] == "best" and not any(ties[1:]), ties
    assert page.eval_on_selector_all("#best-table tbody tr:first-child td.num", "(tds) => tds.map((t) => t.textContent)")[0].startswith("0.4")
    assert page.is_hidden("#tie-note")
    w.check_clean()


def test_history_any_axis_and_importance_charts(stack, demo_user, browser):  # noqa: F811
    from swarm.models import Insight

    run = _synthetic_run(400, name="charts")
    goal = run.goal
    Insight.objects.create(workload=goal.workload, target=goal.target, kind=Insight.Kind.IMPORTANCE, run=run,
                           data={"importances": {"VEC": 0.1, "BLOCK": 0.9}, "method": "optuna PED-ANOVA", "objective": "latency_ms", "n": 10})
    newest = {"ROWS_PER_CHUNK": 0.45, "VEC": 0.25, "UNROLL": 0.15, "BLOCK": 0.1, "TILE": 0.05}
    Insight.objects.create(workload=goal.workload, target=goal.target, kind=Insight.Kind.IMPORTANCE, run=run,
                           data={"importances": newest, "method": "optuna PED-ANOVA", "objective": "latency_ms", "n": 300})
    ok = list(run.candidates.filter(status="ok").order_by("evaluated_at", "id").values_list("evidence__latency_ms", "evidence__max_rel_error"))
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    _watch_run(w, f"{stack}/runs/{run.pk}/")

    # history: every ok candidate a point, the best feasible so far as steps
    page.locator("#history-chart").scroll_into_view_if_needed()
    page.wait_for_function(f"document.getElementById('history-chart').dataset.points === '{len(ok)}'", timeout=30_000)
    h = _chart(page, "history-chart")
    assert h["y"] == "latency_ms (ms)" and h["x"].startswith("evaluation")
    feasible_pts, breaking, best = h["traces"]
    assert len(feasible_pts["x"]) + len(breaking["x"]) == len(ok)
    assert len(breaking["x"]) == sum(1 for _, e in ok if e > 1e-4)
    assert best["y"] == sorted(best["y"], reverse=True) and best["y"][-1] == pytest.approx(
        min(lat for lat, e in ok if e <= 1e-4), rel=1e-5)
    assert best["x"][-1] == run.candidates.count()  # the line runs on to the latest evaluation
    assert re.match(r"latency_ms: \d[\d.]* ms<br>evaluation \d+", feasible_pts["text"][0]), feasible_pts["text"][0]
    page.select_option("#hist-x", "time")
    page.wait_for_function("document.getElementById('history-chart').layout.xaxis.title.text.startsWith('seconds')")
    page.select_option("#hist-x", "order")
    page.locator("#history-card").scroll_into_view_if_needed()
    w.shot("run_history")

    # any axis: the most important parameter against the throughput, coloured by another parameter
    page.locator("#scatter-chart").scroll_into_view_if_needed()
    page.wait_for_function("Number(document.getElementById('scatter-chart').dataset.points) > 0", timeout=30_000)
    assert page.input_value("#sc-x") == "p:ROWS_PER_CHUNK" and page.input_value("#sc-y") == "m:gbps"
    s = _chart(page, "scatter-chart")
    assert s["x"] == "ROWS_PER_CHUNK" and s["y"] == "gbps (GB/s)" and s["traces"][0]["colorbar"]
    page.select_option("#sc-x", "m:latency_ms")
    page.select_option("#sc-y", "m:max_rel_error")
    page.uncheck("#sc-logx")
    page.uncheck("#sc-logy")
    page.select_option("#sc-color", "p:BLOCK")
    page.wait_for_function("document.getElementById('scatter-chart').layout.xaxis.title.text === 'latency_ms (ms)' && "
                           "document.getElementById('scatter-chart').data[0].marker.colorbar.title.text === 'BLOCK'")
    s = _chart(page, "scatter-chart")
    assert s["y"] == "max_rel_error" and len(s["traces"][0]["x"]) == len(ok)
    hover = _hover_text(page, "scatter-chart", s["traces"][0]["x"][0], s["traces"][0]["y"][0])
    assert re.search(r"latency_ms: [\d.]+ ms", hover) and re.search(r"max_rel_error: [\d.e+-]+", hover) and "BLOCK: " in hover, hover
    page.mouse.move(0, 0)
    page.locator("#scatter-card").scroll_into_view_if_needed()
    w.shot("run_any_axis")

    # importance: the newest insight, one bar per parameter, also after live insight events
    page.wait_for_function(f"document.getElementById('importance-chart').dataset.bars === '{len(newest)}'")
    bars = _chart(page, "importance-chart")["traces"][0]["y"]
    assert sorted(bars) == sorted(newest) and bars[-1] == "ROWS_PER_CHUNK"  # largest at the top
    live = {"ROWS_PER_CHUNK": 0.5, "VEC": 0.3, "BLOCK": 0.2}
    for k in range(3):  # the same insight kind arriving again and again
        page.evaluate("(d) => window.runPage.receive({event: 'insight', seq: null, data: d})", {
            "id": 10_000 + k, "kind": "importance", "workload": goal.workload, "target": goal.target,
            "data": {"importances": live, "method": "optuna PED-ANOVA", "objective": "latency_ms", "n": 400 + k}})
    page.wait_for_function("document.getElementById('importance-chart').dataset.bars === '3'")
    bars = _chart(page, "importance-chart")["traces"][0]["y"]
    assert len(bars) == len(set(bars)) == 3
    assert page.locator("#insights .insight-importance").count() == 1
    assert "n=402" in page.inner_text("#insights .insight-importance")
    page.locator("#importance-card").scroll_into_view_if_needed()
    w.shot("run_importance")

    # the frontier's hover names its metrics with units too
    page.locator("#frontier-chart").scroll_into_view_if_needed()
    tmpl = page.evaluate("document.getElementById('frontier-chart').data[0].hovertemplate")
    assert "latency_ms: %{x:.4~g} ms" in tmpl and "x=" not in tmpl, tmpl
    w.check_clean()


def test_a_compute_bound_workload_charts_gflops(stack, demo_user, browser):  # noqa: F811
    _, run, _ = _evaluated("gemm", "test-small", [
        {"latency_ms": 0.2 + 0.1 * i, "max_rel_error": 1e-7, "gbps": 0.128 / (1 + i), "gflops": 12.345678 / (1 + i)}
        for i in range(3)], name="gemm charts")
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    _watch_run(w, f"{stack}/runs/{run.pk}/")
    page.locator("#scatter-chart").scroll_into_view_if_needed()
    page.wait_for_function("Number(document.getElementById('scatter-chart').dataset.points) > 0", timeout=30_000)
    s = _chart(page, "scatter-chart")
    assert page.input_value("#sc-y") == "m:gflops" and s["y"] == "gflops (GFLOP/s)"
    assert "gflops: 12.35 GFLOP/s" in s["traces"][0]["text"][0]
    w.shot("run_any_axis_gflops")
    w.check_clean()
