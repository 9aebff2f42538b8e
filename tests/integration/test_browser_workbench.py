"""The workbench for a day of real work, in real Chromium against the real processes: the
fingerprint as a table, archiving and duplicating goals, the goal editor's defaults, throughput
in its unit, numbers with units and significant digits."""

import os
import re

import pytest

from tests.integration.test_browser import Watched, browser  # noqa: F401  (the browser fixture)

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

FINGERPRINT = {
    "backend": "cpu", "compiler": "/usr/bin/cc", "flags": ["-O3", "-march=native"], "cpu_model": "AMD EPYC",
    "nproc": 2, "seed": 1234, "compile_s": 0.4213456, "shape_set": "test-small",
    "bench": {"warmup_ms": 20.0, "rep_ms": 150.0, "flush": "evict", "flush_bytes": 64 * 2**20},
    "limits": {"gbps": 41.23456789, "gflops": 512.0, "source": "measured"},
    "sandbox": {"network": "none", "seccomp": {"mode": "filter", "denied": 3}},
    "child_wall_s": {"validation": 1.23456, "timing": 2.5},
}


def _evaluated(workload: str, shape_set: str, metrics: dict, name: str = "workbench", fingerprint=None):
    """An ok candidate of a new goal of `workload` with the given metrics and fingerprint."""
    import kernels
    from swarm.models import Candidate, Evidence, Goal, Run

    goal = Goal.objects.create(name=name, workload=workload, target="cpu-x86_64", shape_set=shape_set,
                               objectives=[{"metric": "latency_ms", "direction": "minimize"}],
                               space=kernels.default_space(workload).to_dict(), source=kernels.load_template(workload))
    run = Run.objects.create(goal=goal, budget=2, seed=1, space=goal.space, state=Run.State.FINISHED)
    out = []
    for n, m in enumerate(metrics if isinstance(metrics, list) else [metrics]):
        c = Candidate.objects.create(goal=goal, run=run, generation=1, agent="random", content_hash=f"{n}{workload}".ljust(64, "0"),
                                     params={p["name"]: p["values"][0] for p in goal.space["parameters"]},
                                     source=goal.source, status="ok")
        Evidence.objects.create(candidate=c, status="ok", metrics=m, fingerprint=fingerprint or FINGERPRINT,
                                samples_ms={"all": [m.get("latency_ms", 1.0)] * 5})
        out.append(c)
    return goal, run, out


def test_the_fingerprint_is_a_readable_table(stack, demo_user, browser):  # noqa: F811
    _, _, (c,) = _evaluated("rmsnorm", "test-small", {"latency_ms": 0.5, "max_rel_error": 1e-7, "gbps": 10.0})
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    page.goto(f"{stack}/candidates/{c.pk}/")
    page.click("#fingerprint-details summary")
    text = page.inner_text("#fingerprint")
    assert "{" not in text and "'" not in text, text  # no Python repr
    groups = page.eval_on_selector_all("#fingerprint table", "(ts) => ts.map((t) => t.dataset.group)")
    assert groups[0] == "environment" and {"bench", "limits", "sandbox", "child_wall_s"} <= set(groups), groups
    row = lambda group, key: page.inner_text(  # noqa: E731
        f"#fingerprint table[data-group={group}] tr:has(th:text-is('{key}')) td")
    assert row("environment", "nproc") == "2 CPUs"
    assert row("environment", "compile_s") == "0.4213 s"
    assert row("environment", "flags") == "-O3 -march=native"
    assert row("bench", "warmup_ms") == "20 ms" and row("bench", "flush_bytes") == "64 MiB"
    assert row("limits", "gbps") == "41.23 GB/s" and row("limits", "gflops") == "512 GFLOP/s"
    assert row("sandbox", "seccomp.mode") == "filter"  # nested keys flattened
    page.locator("#fingerprint").scroll_into_view_if_needed()
    w.shot("candidate_fingerprint")
    w.check_clean()


def test_archive_hides_a_goal_and_duplicate_opens_its_copy_in_the_editor(stack, demo_user, browser):  # noqa: F811
    from swarm.goals.lifecycle import default_goal
    from swarm.models import Run

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="to archive")
    run = Run.objects.create(goal=goal, budget=2, seed=1, space=goal.space, state=Run.State.FINISHED)
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    assert "to archive" in page.inner_text("#goal-table")
    page.click("#goal-table a:text-is('to archive')")
    page.click("#archive-form button:has-text('Archive')")
    page.wait_for_selector("#archived-note")
    assert "cannot start new runs" in page.inner_text("#archived-note") and not page.locator("#run-form").count()
    assert page.locator(f"a:text-is('run {run.pk}')").count() == 1  # its runs kept
    w.shot("goal_archived")
    # the server refuses a run of the archived goal, with the reason
    resp = page.evaluate("""async (url) => {
        const csrf = document.querySelector('input[name=csrfmiddlewaretoken]').value;
        const body = new FormData(); body.append('budget', '4'); body.append('batch_size', '2');
        const r = await fetch(url, {method: 'POST', body, headers: {'X-CSRFToken': csrf}});
        return [r.status, await r.text()];
    }""", f"{stack}/goals/{goal.pk}/runs/")
    assert resp[0] == 400 and "is archived: unarchive it to start runs" in resp[1]
    page.goto(stack + "/")
    assert "to archive" not in page.inner_text("#goal-table")
    page.click("#goal-tabs a:has-text('Archived')")
    assert "to archive" in page.inner_text("#goal-table")
    w.shot("goals_archived_tab")

    # duplicate: a copy, opened in the editor
    page.click("#goal-table a:text-is('to archive')")
    page.click("#duplicate-form button")
    page.wait_for_url(re.compile(r".*/goals/\d+/edit/$"))
    assert page.input_value("input[name=name]") == "to archive (copy)"
    w.shot("goal_duplicated")
    page.goto(stack + "/")
    assert "to archive (copy)" in page.inner_text("#goal-table")
    w.check_clean()


def test_the_goal_editor_follows_the_workloads_defaults_until_the_name_is_typed(stack, demo_user, browser):  # noqa: F811
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    page.click("text=New goal")
    # ?. : until the click's navigation lands, the old page (no #space-size) is the one polled
    page.wait_for_function("document.getElementById('space-size')?.textContent.includes('valid of')")
    assert page.input_value("input[name=name]") == "rmsnorm / cpu-x86_64 / llama3-8b: minimise latency"
    assert "void rmsnorm(" in page.inner_text("#preview")
    # switching the workload: the default name, space and template (and so the preview) follow
    page.select_option("select[name=workload]", "gemm")
    page.wait_for_function("document.getElementById('goal-form').dataset.defaultsFor?.startsWith('gemm/')")
    shape_set = page.input_value("select[name=shape_set]")
    assert page.input_value("input[name=name]") == f"gemm / cpu-x86_64 / {shape_set}: minimise latency"
    assert "ROWS_PER_CHUNK" not in page.input_value("textarea[name=parameters]")
    page.wait_for_function("document.getElementById('preview').textContent.includes('void gemm(')")
    first = page.locator("#space-editor tbody tr").first.locator("input.name").input_value()
    assert f"#define {first} " in page.inner_text("#preview")  # the preview's #define lines are the new space's
    w.shot("goal_form_gemm_defaults")
    # a name the engineer typed is kept across a switch
    page.fill("input[name=name]", "my gemm goal")
    page.select_option("select[name=workload]", "rmsnorm")
    page.wait_for_function("document.getElementById('goal-form').dataset.defaultsFor?.startsWith('rmsnorm/')")
    assert page.input_value("input[name=name]") == "my gemm goal"
    page.wait_for_function("document.getElementById('preview').textContent.includes('void rmsnorm(')")
    w.check_clean()


def test_throughput_is_in_gflops_for_a_compute_bound_workload(stack, demo_user, browser):  # noqa: F811
    from tests.integration.test_browser import _best_table_heads, _watch_run

    gemm, run, cands = _evaluated("gemm", "test-small", [
        {"latency_ms": 0.2 + 0.1 * i, "max_rel_error": 1e-7, "gbps": 0.128 / (1 + i), "gflops": 12.345678 / (1 + i)}
        for i in range(2)], name="gemm throughput")
    _, norm_run, _ = _evaluated("rmsnorm", "test-small", {"latency_ms": 0.5, "max_rel_error": 1e-7, "gbps": 10.0,
                                                           "gflops": 0.2}, name="rmsnorm throughput")
    w, heads = _best_table_heads(browser, stack, demo_user, run.pk)
    page = w.page
    assert "GFLOP/s" in heads and "GB/s" not in heads, heads
    assert page.inner_text("#best-table tbody tr:first-child td[data-metric=gflops]").startswith("12.3")
    page.locator("#best-table").scroll_into_view_if_needed()
    w.shot("run_best_gflops")
    page.goto(f"{stack}/candidates/{cands[0].pk}/")
    assert " ".join(page.inner_text("#throughput").split()).startswith("Throughput 12.35 GFLOP/s (compute-bound workload; 0.128 GB/s)")
    w.shot("candidate_gflops")
    # a memory-bound workload keeps GB/s
    _watch_run(w, f"{stack}/runs/{norm_run.pk}/")
    page.wait_for_selector("#best-table tbody tr")
    heads = page.eval_on_selector_all("#best-table thead th", "(ths) => ths.map((t) => t.textContent)")
    assert "GB/s" in heads and "GFLOP/s" not in heads, heads
    w.check_clean()


def test_numbers_carry_units_and_a_few_digits_and_compare_colours_the_deltas(stack, demo_user, browser):  # noqa: F811
    _, _, (a, b) = _evaluated("rmsnorm", "test-small", [
        {"latency_ms": 98.27483050000001, "max_rel_error": 1.234567e-7, "gbps": 10.0},
        {"latency_ms": 90.1, "max_rel_error": 1.234567e-7, "gbps": 8.123456789}], name="digits")
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    page.goto(f"{stack}/candidates/{a.pk}/")
    cell = lambda table, key: page.inner_text(f"{table} tr:has(th:text-is('{key}')) td")  # noqa: E731
    assert cell("#metrics", "latency_ms") == "98.27 ms" and cell("#metrics", "gbps") == "10 GB/s"
    assert cell("#metrics", "max_rel_error") == "1.235e-07"
    assert "98.27483" not in page.inner_text("main")
    w.shot("candidate_units")
    page.goto(f"{stack}/compare/?ids={a.pk},{b.pk}")
    row = "#metric-diff tr:has(th:text-is('{}')) td"
    txt = lambda loc: " ".join(loc.inner_text().split())  # noqa: E731
    latency = page.locator(row.format("latency_ms"))
    assert txt(latency.nth(0)) == "98.27 ms" and txt(latency.nth(1)) == "90.1 ms (-8.3%)"
    assert "better" in latency.nth(1).get_attribute("class")  # lower latency
    gbps = page.locator(row.format("gbps"))
    assert txt(gbps.nth(1)) == "8.123 GB/s (-18.8%)" and "worse" in gbps.nth(1).get_attribute("class")
    err = page.locator(row.format("max_rel_error")).nth(1)
    assert txt(err) == "1.235e-07 (+0.0%)" and "better" not in err.get_attribute("class") \
        and "worse" not in err.get_attribute("class")
    colours = page.evaluate("""[...document.querySelectorAll('#metric-diff td.better, #metric-diff td.worse')]
        .map((td) => getComputedStyle(td).color)""")
    assert len(set(colours)) == 2, colours  # better and worse in two colours
    page.locator("#metric-diff").scroll_into_view_if_needed()
    w.shot("compare_deltas")
    w.check_clean()
