"""Stragglers in real Chromium against the real processes (embedded server with its worker
thread, or uvicorn and a Celery worker process): a running candidate shows its elapsed time
and is cancelled from the run page; a candidate far slower than the incumbent is pruned."""

import os
import re
import time

import pytest

from tests.integration.test_browser import Watched, browser  # noqa: F401  (the browser fixture)
from tests.kernels.test_pruning import SLOW_C

pytestmark = [pytest.mark.browser, pytest.mark.timeout(600)]
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

HOPELESS, ENDLESS = 300, 60000  # ms each call spins: pruned against a 0.01 ms incumbent; cancelled


def _goal_with_incumbent():
    """A goal whose template spins SPIN_MS per call, and a fast incumbent already measured."""
    from swarm.models import Candidate, Evidence, Goal, Run

    goal = Goal.objects.create(
        name="stragglers", workload="rmsnorm", target="cpu-x86_64", shape_set="test-small",
        objectives=[{"metric": "latency_ms", "direction": "minimize"}],
        constraints=[{"metric": "max_rel_error", "op": "<=", "value": 1e-4}],
        space={"parameters": [{"name": "SPIN_MS", "values": [HOPELESS, ENDLESS]}], "restrictions": []},
        source=SLOW_C, prune_factor=3.0)
    old = Run.objects.create(goal=goal, budget=1, seed=1, space=goal.space, state=Run.State.FINISHED)
    c = Candidate.objects.create(goal=goal, run=old, generation=1, agent="random", content_hash="f" * 64,
                                 params={"SPIN_MS": 0}, source=SLOW_C, status="ok")
    Evidence.objects.create(candidate=c, status="ok", metrics={
        "latency_ms": 0.02, "latency_ms[rows=1,hidden=256]": 0.01, "latency_ms[rows=8,hidden=256]": 0.01,
        "max_rel_error": 1e-7}, fingerprint={"child_wall_s": {"validation": 0.3, "timing": 0.4}})
    return goal


def _status(pk):
    from swarm.models import Candidate

    return Candidate.objects.filter(pk=pk).values_list("status", flat=True).first()


def test_a_running_candidate_ticks_is_cancelled_and_a_hopeless_one_is_pruned(stack, demo_user, browser):  # noqa: F811
    from swarm.models import Candidate, CandidateStatus

    goal = _goal_with_incumbent()
    w = Watched(browser, stack)
    page = w.page
    w.login(*demo_user)
    page.goto(f"{stack}/goals/{goal.pk}/")
    page.fill("input[name=budget]", "2")
    page.fill("input[name=batch_size]", "2")
    page.click("button:has-text('Start run')")
    page.wait_for_url(re.compile(r".*/runs/\d+/$"), timeout=60_000)
    page.wait_for_function("document.querySelector('#ws-state').textContent === 'connected'", timeout=30_000)
    run_id = int(re.search(r"/runs/(\d+)/", page.url).group(1))

    # the endless candidate shows as running, with an elapsed time that ticks
    row = page.locator(f"#running-list li:has-text('SPIN_MS={ENDLESS}')")
    row.wait_for(timeout=240_000)
    first = row.locator(".elapsed").inner_text()
    page.wait_for_function(
        f"(() => {{ const e = document.querySelector(\"#running-list li[data-candidate] .elapsed\"); "
        f"return e && e.textContent !== {first!r}; }})()", timeout=30_000)
    assert re.fullmatch(r"\d+ s", row.locator(".elapsed").inner_text())
    w.shot("run_running_candidate")
    endless = int(row.get_attribute("data-candidate"))

    row.locator("button.cancel").click()
    row.wait_for(state="detached", timeout=30_000)
    assert _status(endless) == CandidateStatus.CANCELLED

    # the run ends once nothing is in flight; the hopeless candidate was pruned, with its calls so far
    page.wait_for_function("document.querySelector('#run-state').textContent === 'finished'", timeout=240_000)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and _status(endless) == CandidateStatus.CANCELLED and not \
            Candidate.objects.filter(pk=endless, evidence__isnull=False).exists():
        time.sleep(0.5)  # the worker stores the cancelled evaluation's evidence after stopping its child
    hopeless = Candidate.objects.select_related("evidence").get(run_id=run_id, params__SPIN_MS=HOPELESS)
    assert hopeless.status == CandidateStatus.PRUNED, hopeless.evidence.log
    assert hopeless.evidence.metrics["prune_ratio"] > 3
    counts = page.inner_text("#run-counts")
    assert "pruned: 1" in counts and "cancelled: 1" in counts, counts
    assert Candidate.objects.get(pk=endless).evidence.status == CandidateStatus.CANCELLED
    w.shot("run_pruned_and_cancelled")

    page.goto(f"{stack}/candidates/{hopeless.pk}/")
    assert "pruned" in page.inner_text("body")
    w.shot("candidate_pruned")
    w.check_clean()
