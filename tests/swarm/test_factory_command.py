import json
import time
from datetime import datetime
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from swarm.goals import replay
from swarm.management.commands import factory as factory_command
from swarm.models import Candidate, CandidateStatus, Run
from swarm.runs import orchestrator


@pytest.mark.django_db
def test_factory_run_prints_one_json_result():
    out = StringIO()
    call_command("factory", "run", "--workload", "rmsnorm", "--target", "cpu-x86_64", "--shape-set", "test-small",
                 "--budget", "5", "--seed", "11", "--json", stdout=out)
    result = json.loads(out.getvalue())
    assert result["evaluated"] == 5
    assert sum(result["status_counts"].values()) == 5
    assert result["best"]["metrics"]["latency_ms"] > 0
    assert set(result["best"]["params"]) == {"ROWS_PER_CHUNK", "UNROLL", "VEC", "ACC_DOUBLE"}
    assert result["best"]["id"] in [c["id"] for c in result["frontier"]]
    assert result["baseline"]["name"] == "numpy" and result["baseline"]["latency_ms"] > 0
    # The run's own time, from its creation to its end (what candidates per minute divide by).
    started, finished = (datetime.fromisoformat(result[k]) for k in ("started_at", "finished_at"))
    assert result["wall_s"] == pytest.approx((finished - started).total_seconds()) and result["wall_s"] > 0


@pytest.mark.django_db
def test_factory_run_shows_a_table_without_json():
    out = StringIO()
    call_command("factory", "run", "--shape-set", "test-small", "--budget", "2", "--no-baseline", stdout=out)
    assert "Pareto frontier" in out.getvalue()


@pytest.mark.django_db
def test_factory_run_rejects_an_unknown_workload():
    with pytest.raises(CommandError, match="unknown workload"):
        call_command("factory", "run", "--workload", "conv9d", "--budget", "2", "--json")


GEMM = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "tuning-cache" / "gemm-clblast-xgemm_RTX-3090.json.gz"


@pytest.mark.django_db
@pytest.mark.skipif(not GEMM.exists(), reason="shared tuning-cache data set not present")
def test_factory_run_finishes_a_run_whose_candidates_another_process_holds(monkeypatch):
    """A server's sweeper may propose the CLI's run's next generation and dispatch it to its
    own workers: the CLI still returns only once the run has ended, evaluating what is left
    queued and waiting for what a live process holds."""
    goal, _ = replay.import_cache(GEMM)
    run, pending = orchestrator.start_run(goal, budget=12, seed=3, batch_size=4)
    held, queued = pending[0], pending[1:]  # a live worker elsewhere claimed one; three wait in its queue
    Candidate.objects.filter(pk=held.pk).update(status=CandidateStatus.RUNNING, claimed_by="elsewhere:1:1",
                                                claimed_at=timezone.now())
    waits = []

    def other_process_finishes(seconds):  # while the CLI waits, the other worker evaluates its claim
        waits.append(seconds)
        if Candidate.objects.filter(pk=held.pk, status=CandidateStatus.RUNNING).update(
                status=CandidateStatus.QUEUED, claimed_by=""):
            orchestrator.evaluate_candidate(held.pk)

    monkeypatch.setattr(time, "sleep", other_process_finishes)
    factory_command.Command._drive(run, [], progress=None)  # the sweeper took every pending slot
    run.refresh_from_db()
    assert run.state == Run.State.FINISHED
    assert waits, "the CLI returned without waiting for the held candidate"
    assert run.candidates.filter(status="ok").count() == 12
    assert not run.candidates.filter(pk__in=[c.pk for c in queued], status__in=["queued", "running"]).exists()


@pytest.mark.django_db
@pytest.mark.skipif(not GEMM.exists(), reason="shared tuning-cache data set not present")
def test_ctrl_c_on_factory_run_stops_its_run_and_keeps_the_evidence(monkeypatch):
    goal, _ = replay.import_cache(GEMM)
    calls = []
    real = orchestrator.evaluate_batch

    def interrupted_on_the_third_batch(ids, **kw):
        calls.append(ids)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(ids, **kw)

    monkeypatch.setattr(orchestrator, "evaluate_batch", interrupted_on_the_third_batch)
    with pytest.raises(CommandError, match=r"interrupted: run \d+ stopped"):
        call_command("factory", "run", "--goal", str(goal.pk), "--budget", "40", "--seed", "1", "--json", stdout=StringIO())
    run = Run.objects.get(goal=goal)
    assert run.state == Run.State.STOPPED and "Ctrl-C on factory run" in run.end_reason
    assert run.candidates.filter(status="ok").count() == 8  # the two batches evaluated before it
    assert not run.candidates.filter(status="queued").exists()


@pytest.mark.django_db
def test_a_failed_run_prints_its_summary_and_exits_with_status_1(monkeypatch):
    from swarm.agents.random_search import RandomAgent

    def broken(self, view, n):
        raise RuntimeError("the agent broke")

    monkeypatch.setattr(RandomAgent, "propose", broken)
    out = StringIO()
    with pytest.raises(CommandError, match="failed: .*RuntimeError: the agent broke") as err:
        call_command("factory", "run", "--shape-set", "test-small", "--budget", "4", "--agents", "random",
                     "--no-baseline", "--json", stdout=out)
    assert err.value.returncode == 1
    summary = json.loads(out.getvalue())
    assert summary["state"] == "failed" and "the agent broke" in summary["end_reason"]
