"""One stored baseline per (workload, target, shape set): asked for when a goal is created or
its run starts, measured once, and the one speedup the goal list, the goal and run pages, the
run summary (API) and ``factory run --json`` show."""

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from swarm.models import Baseline, Goal, Run
from swarm.runs import baselines, orchestrator
from tests.swarm.test_views import GOAL_POST


@pytest.mark.django_db
def test_factory_run_json_and_the_goal_list_give_the_same_speedup_for_the_same_run(client, owner):
    out = StringIO()
    call_command("factory", "run", "--workload", "rmsnorm", "--target", "cpu-x86_64", "--shape-set", "test-small",
                 "--budget", "3", "--seed", "7", "--json", stdout=out)
    result = json.loads(out.getvalue())
    b = Baseline.objects.get()
    assert b.state == Baseline.State.OK and b.measured_at is not None and b.fingerprint["host"]
    cli = result["baseline"]
    assert cli["latency_ms"] == cli["baseline_ms"] == b.latency_ms
    assert cli["speedup"] == pytest.approx(b.latency_ms / result["best"]["metrics"]["latency_ms"])
    assert cli["measured_at"] == b.measured_at.isoformat() and cli["host"] == b.fingerprint["host"]

    client.force_login(owner)
    row = client.get(reverse("goal-list")).context["rows"][0]
    assert row["speedup"]["speedup"] == cli["speedup"]
    assert row["speedup"]["measured_at"] == b.measured_at and row["speedup"]["host"] == cli["host"]
    run = Run.objects.get()
    api = client.get(reverse("api-run-summary", args=[run.pk])).json()["baseline"]
    assert api["speedup"] == cli["speedup"] and api["measured_at"] == cli["measured_at"]
    page = client.get(reverse("run-detail", args=[run.pk]))
    assert page.context["speedup"]["speedup"] == cli["speedup"]
    assert f"{cli['speedup']:.2f}×" in page.content.decode()
    goal_page = client.get(reverse("goal-detail", args=[run.goal_id]))
    assert goal_page.context["speedup"]["speedup"] == cli["speedup"]
    # a second run of the key reads the same row: nothing is timed again
    call_command("factory", "run", "--goal", str(run.goal_id), "--budget", "1", "--seed", "8", "--json", stdout=StringIO())
    assert Baseline.objects.get().measured_at == b.measured_at


@pytest.mark.django_db
def test_starting_a_run_asks_for_the_baseline_once(small_goal, monkeypatch):
    sent: list = []
    monkeypatch.setattr(baselines, "send_on_commit", lambda name, *args, **kw: sent.append((name, args)))
    orchestrator.start_run(small_goal, budget=1, seed=1)
    orchestrator.start_run(small_goal, budget=1, seed=2)
    b = Baseline.objects.get()
    assert (b.workload, b.target, b.shape_set) == ("rmsnorm", "cpu-x86_64", "test-small")
    assert b.state == Baseline.State.MEASURING and sent == [(baselines.MEASURE_BASELINE, (b.pk,))]
    assert baselines.speedup(small_goal, 0.1) is None  # not measured yet: no figure anywhere
    baselines.measure(b.pk, timer=lambda workload, shape_set: 0.5)
    assert baselines.speedup(small_goal, 0.25)["speedup"] == 2.0
    # a repeated task keeps the first figure
    baselines.measure(b.pk, timer=lambda workload, shape_set: 9.0)
    b.refresh_from_db()
    assert b.latency_ms == 0.5
    assert baselines.speedup(small_goal, None) is None and baselines.speedup(small_goal, 0.0) is None


@pytest.mark.django_db
def test_creating_a_goal_asks_for_its_baseline(client, owner, django_capture_on_commit_callbacks):
    client.force_login(owner)
    with django_capture_on_commit_callbacks(execute=False):
        client.post(reverse("goal-create"), GOAL_POST)
    goal = Goal.objects.get()
    assert Baseline.objects.filter(workload=goal.workload, target=goal.target, shape_set=goal.shape_set,
                                   state=Baseline.State.MEASURING).exists()
