"""The engineer's workbench in real Chromium, against the real processes (server and worker):
each page's main flow, a screenshot of each page, and nothing requested outside the app."""

import os
import re
import shutil
from urllib.parse import urlparse

import pytest

from tests.integration.conftest import ARTIFACTS
from tests.integration.screenshots import full_page_png

pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

# Playwright's sync API runs an event loop in this thread; the ORM is used only before it starts.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
SHOTS = ARTIFACTS / "screenshots"


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=shutil.which("chromium") or shutil.which("chromium-browser"),
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )
        yield b
        b.close()


class Watched:
    """A page that records requests outside the app and script errors."""

    def __init__(self, browser, base: str) -> None:
        self.base = base
        host = urlparse(base).netloc
        self.outside: list[str] = []
        self.errors: list[str] = []
        self.page = browser.new_page(viewport={"width": 1400, "height": 1000})
        self.page.on("request", lambda r: urlparse(r.url).netloc not in (host, "") and not r.url.startswith(("data:", "blob:"))
                     and self.outside.append(r.url))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))

    def shot(self, name: str) -> None:
        full_page_png(self.page, SHOTS / f"{name}.png")

    def login(self, user: str, password: str) -> None:
        self.page.goto(self.base + "/")
        self.page.fill("input[name=username]", user)
        self.page.fill("input[name=password]", password)
        self.page.click("button[type=submit]")
        self.page.wait_for_url(self.base + "/")

    def check_clean(self) -> None:
        assert self.outside == [], f"pages requested outside the app: {self.outside}"
        assert self.errors == [], self.errors


def test_define_watch_compare_promote(stack, demo_user, browser):
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    assert page.inner_text("#goal-table")  # the demo goal
    w.shot("goals")

    # goal form: the space is checked live on the server, the error shown in place
    page.click("text=New goal")
    page.fill("input[name=name]", "RMSNorm small, browser")
    page.select_option("select[name=shape_set]", label="rmsnorm: test-small")
    page.wait_for_function("document.getElementById('space-size').textContent.includes('valid of')")
    assert "#define ROWS_PER_CHUNK" in page.inner_text("#preview")
    page.fill("textarea[name=restrictions]", "open('/etc/passwd')")
    page.wait_for_function("document.getElementById('field-restrictions').classList.contains('has-error')")
    assert "not allowed" in page.inner_text("#field-restrictions")
    page.click("button:has-text('Create goal')")  # the server refuses it too, nothing saved
    assert "not allowed" in page.inner_text(".has-error")
    # the design-space editor: remove a parameter, add one back, the size follows
    page.fill("textarea[name=restrictions]", "UNROLL * VEC <= 32")
    rows = page.locator("#space-editor tbody tr")
    n = rows.count()
    rows.last.locator("button").click()
    assert page.locator("#space-editor tbody tr").count() == n - 1
    page.click("#add-param")
    page.locator("#space-editor tbody tr").last.locator("input.name").fill("ACC_DOUBLE")
    page.locator("#space-editor tbody tr").last.locator("input.values").fill("0, 1")
    page.wait_for_function("!document.getElementById('field-restrictions').classList.contains('has-error')")
    page.wait_for_function("document.getElementById('space-size').textContent.includes('valid of 192 points')")
    w.shot("goal_form")
    page.click("button:has-text('Create goal')")
    page.wait_for_selector("text=Start a run")
    w.shot("goal_detail")

    # run: the frontier, convergence, leaderboard and log fill live over the websocket
    page.fill("input[name=budget]", "8")
    page.fill("input[name=batch_size]", "4")
    page.click("button:has-text('Start run')")
    page.wait_for_selector("#ws-state")
    page.wait_for_function("document.querySelector('#ws-state').textContent === 'connected'", timeout=30_000)
    page.wait_for_function("Number(document.querySelector('#n-points').textContent) >= 1", timeout=240_000)
    page.wait_for_function("document.querySelector('#run-state').textContent === 'finished'", timeout=300_000)
    page.wait_for_function("window.runPage.count() === 8 && document.getElementById('frontier-chart').data[2].x.length >= 1")
    drawn = page.evaluate("document.getElementById('frontier-chart').data[0].x.length + document.getElementById('frontier-chart').data[1].x.length")
    assert drawn >= min(2, int(page.inner_text("#n-points")))  # 8 points hardly share an 8-pixel spot
    assert page.locator("#agents-table tbody tr").count() >= 1
    assert page.evaluate("document.getElementById('convergence-chart').data[0].x.length") >= 1
    assert page.locator("#event-log li").count() >= 1
    page.locator("#parcoords-chart").scroll_into_view_if_needed()
    page.wait_for_selector("#parcoords-chart .main-svg", timeout=60_000)
    page.evaluate("window.scrollTo(0, 0)")
    w.shot("run")

    # compare two of the best candidates
    boxes = page.locator("#best-table tbody input[type=checkbox]")
    assert boxes.count() >= 2
    boxes.nth(0).check()
    boxes.nth(1).check()
    page.click("#compare-go")
    page.wait_for_selector("#param-diff")
    assert page.locator("#stored-medians tbody tr").count() >= 1 and page.locator("#paired-pairs button").count() >= 1
    page.wait_for_selector("#compare-chart .main-svg")
    w.shot("compare")
    page.go_back()

    # candidate: source, lineage, validation, timing distribution, roofline
    page.wait_for_selector("#best-table tbody tr")
    page.click("#best-table tbody tr:first-child td:nth-child(2) a")
    page.wait_for_selector("text=Promote to production")
    page.wait_for_selector("#timing-chart .main-svg")
    page.wait_for_selector("#roofline-chart .main-svg")
    assert "Ceilings:" in page.inner_text("#roofline-source")
    candidate_id = re.search(r"/candidates/(\d+)/", page.url).group(1)
    w.shot("candidate")

    # promotion: extended validation on the worker, then production, history and audit log
    page.click("#promote-form button")
    page.wait_for_selector("#production-table")
    page.wait_for_function("!document.getElementById('validating')", timeout=300_000)
    assert f"#{candidate_id}" in page.inner_text("#production-table")
    assert "promotion.create" in page.inner_text("#audit-log")
    w.shot("production")

    api = page.goto(stack + "/api/production/rmsnorm/cpu-x86_64/test-small/").json()
    assert api.get("evidence", {}).get("status") == "ok" and api["launch_plan"]["entry_point"] == "rmsnorm", api
    w.check_clean()


def test_steer_a_running_run_and_read_the_api_docs(stack, demo_user, browser):
    from swarm.goals.lifecycle import default_goal
    from swarm.models import Insight

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="steering")
    Insight.objects.create(workload="rmsnorm", target="cpu-x86_64", kind="failure_rule",
                           data={"rule": "VEC > 8 and UNROLL > 4", "status": "wrong_result", "support": 3,
                                 "precision": 1.0, "restriction": "not (VEC > 8 and UNROLL > 4)"})
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    page.goto(f"{stack}/goals/{goal.pk}/")
    page.fill("input[name=budget]", "400")
    page.fill("input[name=batch_size]", "2")
    page.click("button:has-text('Start run')")
    page.wait_for_selector("#ws-state")
    page.wait_for_function("document.querySelector('#ws-state').textContent === 'connected'", timeout=30_000)
    page.wait_for_selector("#direction-form:not([hidden])")

    # a direction that cannot apply: the reason in place, nothing recorded
    page.select_option("#direction-form select[name=kind]", "narrow")
    page.select_option("#direction-form select[name=param]", "UNROLL")
    page.fill("#direction-form input[name=values]", "3")
    page.click("#direction-form button[type=submit]")
    page.wait_for_function("document.getElementById('direction-error').textContent.includes('has no value(s) [3]')")
    page.fill("#direction-form input[name=values]", "1, 2")
    page.click("#direction-form button[type=submit]")
    page.wait_for_function("document.getElementById('direction-error').textContent === ''")
    page.wait_for_selector("#directions-list li:has-text('narrow')")
    # accept a suggested restriction
    page.click("button:has-text('Accept restriction')")
    page.wait_for_selector("#directions-list li:has-text('add_restriction')")
    page.wait_for_selector("#directions-list li:has-text('applied')", timeout=240_000)
    w.shot("run_steering")
    page.click("#stop-form button")
    page.wait_for_function("document.querySelector('#run-state').textContent === 'stopped'", timeout=60_000)

    page.goto(stack + "/api/docs/")
    page.wait_for_selector(".swagger-ui .opblock", timeout=60_000)
    w.shot("api_docs")
    w.check_clean()


def _watch_run(w, url: str) -> None:
    w.page.goto(url)
    w.page.wait_for_function("document.querySelector('#ws-state').textContent === 'connected'", timeout=30_000)
    w.page.wait_for_function("document.body.dataset.drawn === '1'", timeout=60_000)


def _best_table_heads(browser, stack: str, user: tuple[str, str], run_id: int):
    """Sign in as ``user``, open run ``run_id``'s page until it is drawn, and return the page's
    :class:`Watched` and the column heads of its best-candidates table."""
    w = Watched(browser, stack)
    w.login(*user)
    _watch_run(w, f"{stack}/runs/{run_id}/")
    w.page.wait_for_selector("#best-table tbody tr")
    return w, w.page.eval_on_selector_all("#best-table thead th", "(ths) => ths.map((t) => t.textContent)")


def _log_lines(page) -> list[str]:
    return page.eval_on_selector_all("#event-log li", "(lis) => lis.map((li) => li.textContent)")


def test_stopping_keeps_the_event_log_and_a_reload_shows_the_stored_events(stack, demo_user, browser):
    from swarm.goals.lifecycle import default_goal
    from swarm.models import Run

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="stop and log")
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    page.goto(f"{stack}/goals/{goal.pk}/")
    page.fill("input[name=budget]", "400")
    page.fill("input[name=batch_size]", "2")
    page.click("button:has-text('Start run')")
    page.wait_for_selector("#ws-state")
    page.wait_for_function("document.querySelector('#ws-state').textContent === 'connected'", timeout=30_000)
    run_id = int(re.search(r"/runs/(\d+)/", page.url).group(1))
    candidate_line = "[...document.querySelectorAll('#event-log li')].filter((li) => / · /.test(li.textContent)).length"
    page.wait_for_function(f"{candidate_line} >= 2", timeout=240_000)
    before = _log_lines(page)
    page.evaluate("window.stillThisPage = true")
    page.click("#stop-form button")
    page.wait_for_function("document.querySelector('#run-state').textContent === 'stopped'", timeout=60_000)
    assert page.evaluate("window.stillThisPage") is True, "the page posted the stop with fetch, no reload"
    assert not page.locator("#stop-form").count() and "stopped by engineer" in page.inner_text("#run-end")
    page.wait_for_function("[...document.querySelectorAll('#event-log li')].some((li) => li.textContent.includes('run stopped'))",
                           timeout=30_000)
    after = _log_lines(page)
    assert all(line in after for line in before), "the lines shown before the stop are still there"
    w.shot("run_stopped")

    # a new page of the stopped run: its log opens with the run's stored events
    run = Run.objects.get(pk=run_id)
    _watch_run(w, f"{stack}/runs/{run_id}/")
    page.wait_for_function("document.querySelectorAll('#event-log li.stored').length >= 3", timeout=30_000)
    stored = page.eval_on_selector_all("#event-log li.stored", "(lis) => lis.map((li) => li.textContent)")
    assert any("run stopped" in s for s in stored) and any(re.search(r"#\d+ \w+.* · ", s) for s in stored), stored
    assert any("snapshot:" in s for s in _log_lines(page)[:3]), "the live lines above the stored ones"
    assert all(page.eval_on_selector_all("#event-log li.stored time", "(ts) => ts.map((t) => t.textContent !== '')")), \
        "each stored line says when"
    # the finished convergence line runs to the run's end, not to the last improvement
    page.wait_for_function("document.getElementById('convergence-chart').data[1].x.length >= 2", timeout=30_000)
    xs = page.evaluate("document.getElementById('convergence-chart').data[1].x")
    ran_s = (run.finished_at - run.started_at).total_seconds()
    assert abs(xs[-1] - ran_s) < 1.0 and xs[-1] >= xs[-2], (xs, ran_s)
    w.check_clean()


def _quiet_run(goal):
    """A stopped run of `goal` with two agents that have proposed but have no evaluation yet
    (their UCB score infinite, stored as 1e9): nothing in the factory acts on it."""
    from django.utils import timezone

    from swarm.models import AgentRecord, Run

    run = Run.objects.create(goal=goal, budget=50, batch_size=4, seed=1, space=goal.space, constraints=goal.constraints,
                             generation=1, state=Run.State.STOPPED, end_kind=Run.EndKind.STOPPED,
                             end_reason="stopped by the test", finished_at=timezone.now())
    for name in ("random", "evolutionary"):
        AgentRecord.objects.create(run=run, name=name, kind=name, score=1e9, last_share=2)
    return run


def _candidates(goal, first_id: int, n: int, generation: int = 1) -> list[dict]:
    """Candidate events of `n` ok candidates of `goal`'s space (feasible, latency falling)."""
    params = goal.space["parameters"]
    return [{"id": first_id + i, "generation": generation, "agent": "random", "status": "ok",
             "params": {p["name"]: p["values"][(i + j) % len(p["values"])] for j, p in enumerate(params)},
             "metrics": {"latency_ms": 0.5 / (1 + i), "max_rel_error": 1e-7, "gbps": 10.0 * (1 + i)}} for i in range(n)]


def test_agents_without_evaluations_show_no_data_yet(stack, demo_user, browser):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="agents no data")
    run = _quiet_run(goal)
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    _watch_run(w, f"{stack}/runs/{run.pk}/")
    rows = page.locator("#agents-table tbody tr")
    assert rows.count() == 2
    for i in range(2):
        cells = rows.nth(i).locator("td")
        for col in (2, 3, 4, 6):  # evaluations, improvements, credit, score
            assert cells.nth(col).inner_text() == "–" and cells.nth(col).get_attribute("title") == "no data yet"
    assert "1e+9" not in page.inner_text("#agents-table") and "1.00e+9" not in page.inner_text("#agents-table")
    page.locator("#agents-table").scroll_into_view_if_needed()
    w.shot("run_agents_no_data")
    # once an agent has evaluations and a real score, its figures are shown
    page.evaluate("""async () => {
        const agent = (name, evaluations, score) => ({name, kind: name, paused: false, boost: 1, evaluations,
            improvements: evaluations ? 1 : 0, credit: evaluations ? 1 / evaluations : 0, failed_proposals: 0, share: 2, score});
        runPage.receive({event: "generation_finished", data: {number: 1, improvements: {random: 1},
            agents: [agent("random", 4, 0.75), agent("evolutionary", 0, 1e9)]}});
        await runPage.flush();
    }""")
    first = rows.nth(0).locator("td")
    assert first.nth(0).inner_text() == "random" and first.nth(2).inner_text() == "4" and first.nth(6).inner_text() == "0.7500"
    assert rows.nth(1).locator("td").nth(6).get_attribute("title") == "no data yet"
    w.check_clean()


def test_the_convergence_time_line_reaches_now_while_the_run_runs(stack, demo_user, browser):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="convergence to now")
    run = _quiet_run(goal)
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    _watch_run(w, f"{stack}/runs/{run.pk}/")
    # seen by the page as a running run with three improvements, then no event for a while
    page.evaluate("""async (items) => {
        runPage.receive({event: "run", data: {id: 0, state: "running", generation: 1, budget: 50, end_kind: "", end_reason: ""}});
        runPage.receive({event: "candidates", data: {items}});
        await runPage.flush();
    }""", _candidates(goal, 9_000_000, 3))
    end = "(() => { const x = document.getElementById('convergence-chart').data[1].x; return x[x.length - 1]; })()"
    t0, x0 = page.evaluate(f"[Date.now(), {end}]")
    page.wait_for_timeout(2500)
    t1, x1 = page.evaluate(f"[Date.now(), {end}]")
    last_improvement = page.evaluate("document.getElementById('convergence-chart').data[1].x.slice(-2)[0]")
    assert x1 > last_improvement and abs((x1 - x0) - (t1 - t0) / 1000) < 1.2, (x0, x1, t0, t1)
    page.locator("#convergence-chart").scroll_into_view_if_needed()
    w.shot("run_convergence_to_now")
    # once the run has ended, the line stops at its end
    page.evaluate("""async () => {
        runPage.receive({event: "run", data: {id: 0, state: "finished", generation: 1, budget: 50, end_kind: "budget", end_reason: "budget spent"}});
        await runPage.flush();
    }""")
    x2 = page.evaluate(end)
    page.wait_for_timeout(1500)
    assert page.evaluate(end) == x2 >= x1
    w.check_clean()


def test_the_parallel_coordinates_follow_live_candidates_throttled(stack, demo_user, browser):
    from swarm.goals.lifecycle import default_goal

    goal = default_goal("rmsnorm", "cpu-x86_64", "test-small", name="live parcoords")
    run = _quiet_run(goal)
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    _watch_run(w, f"{stack}/runs/{run.pk}/")
    page.locator("#parcoords-chart").scroll_into_view_if_needed()
    batches = [_candidates(goal, 9_100_000 + 100 * b, 4, generation=b + 1) for b in range(30)]
    # 30 batches over 3 s: the chart follows without a click, at most about once a second
    draws = page.evaluate("""async (batches) => {
        const before = runPage.timings.parcoordsDraws;
        for (const items of batches) {
            runPage.receive({event: "candidates", data: {items}});
            await new Promise((r) => setTimeout(r, 100));
        }
        return runPage.timings.parcoordsDraws - before;
    }""", batches)
    page.wait_for_function("document.getElementById('pc-count').textContent === '120'", timeout=30_000)
    assert 2 <= draws <= 5, (draws, page.evaluate("runPage.timings.parts.parcoords"))
    assert page.evaluate("document.getElementById('parcoords-chart').data[0].dimensions[0].values.length") == 120
    assert not page.locator("#pc-draw").count(), "no redraw button: the chart is live"
    w.shot("run_parcoords_live")
    w.check_clean()
