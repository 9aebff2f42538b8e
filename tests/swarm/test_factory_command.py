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


# -- hostile input: a usage error, nothing left behind ---------------------------------------

SMALL = ("--shape-set", "test-small", "--budget", "2", "--no-baseline", "--json")


def nothing_left() -> bool:
    from swarm.models import Goal

    return not Goal.objects.exists() and not Run.objects.exists() and not Candidate.objects.exists()


@pytest.mark.django_db
@pytest.mark.parametrize("option, value, words", [
    ("--budget", "99999999999999999999", "--budget: .*1 to 100000"),
    ("--budget", "0", "--budget: .*1 to 100000"),
    ("--budget", "-3", "--budget: .*1 to 100000"),
    ("--budget", "ten", "--budget: 'ten' is not a whole number"),
    ("--batch-size", "0", "--batch-size: .*1 to 256"),
    ("--batch-size", "5000", "--batch-size: .*1 to 256"),
    ("--seed", "-1", r"--seed: .*0 to 2147483647"),
    ("--seed", str(2**31), r"--seed: .*0 to 2147483647"),
    ("--goal", "99999999999999999999", "--goal: "),
    ("--goal", "0", "--goal: "),
])
def test_out_of_range_numbers_are_usage_errors_that_create_nothing(option, value, words):
    args = [*SMALL, option, value] if option != "--budget" else ["--shape-set", "test-small", "--no-baseline",
                                                                "--json", option, value]
    with pytest.raises(CommandError, match=words):
        call_command("factory", "run", *args, stdout=StringIO())
    assert nothing_left()


@pytest.mark.django_db
def test_a_rejected_run_of_a_new_default_goal_leaves_no_goal():
    with pytest.raises(CommandError):
        call_command("factory", "run", "--shape-set", "deepseek-v3", "--budget", "0", "--json", stdout=StringIO())
    assert nothing_left()


@pytest.mark.django_db
@pytest.mark.parametrize("agents, words", [
    (",", "names no agent"),
    (" , ,", "names no agent"),
    ("", "names no agent"),
    ("nosuch", "unknown agent kind 'nosuch'"),
    ("random,random", "names 'random' twice"),
])
def test_an_agents_value_that_names_no_usable_agent_is_refused(agents, words):
    with pytest.raises(CommandError, match=words):
        call_command("factory", "run", *SMALL, "--agents", agents, stdout=StringIO())
    assert nothing_left()


@pytest.mark.django_db
@pytest.mark.skipif(not GEMM.exists(), reason="shared tuning-cache data set not present")
def test_sigterm_on_factory_run_stops_its_run_and_keeps_the_evidence(monkeypatch):
    import os
    import signal

    goal, _ = replay.import_cache(GEMM)
    outer = []
    previous = signal.signal(signal.SIGTERM, lambda *a: outer.append(a))  # instead of dying, if not handled
    real = orchestrator.evaluator_for
    evaluated = []

    def terminated_on_the_tenth_candidate(g):
        evaluate = real(g)

        def step(*args, **kw):
            evaluated.append(args)
            if len(evaluated) == 10:  # second candidate of the third batch: four are claimed
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)  # the handler raises during the wait
            return evaluate(*args, **kw)
        return step

    monkeypatch.setattr(orchestrator, "evaluator_for", terminated_on_the_tenth_candidate)
    try:
        with pytest.raises(CommandError, match=r"terminated \(SIGTERM\): run \d+ stopped") as err:
            call_command("factory", "run", "--goal", str(goal.pk), "--budget", "40", "--seed", "1", "--json",
                         stdout=StringIO())
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL and not outer  # handled, then restored
        assert err.value.returncode == 128 + signal.SIGTERM
    finally:
        restored = signal.signal(signal.SIGTERM, previous)
    assert restored is not None and restored.__name__ == "<lambda>"  # the outer handler is back
    run = Run.objects.get(goal=goal)
    assert run.state == Run.State.STOPPED and "SIGTERM on factory run" in run.end_reason
    assert run.candidates.filter(status="ok").count() == 8  # the two batches evaluated before it
    assert not run.candidates.filter(status__in=["queued", "running"]).exists()
    interrupted = run.candidates.filter(status="cancelled").select_related("evidence")
    assert interrupted.count() == 4 and all("SIGTERM" in c.evidence.log for c in interrupted)


@pytest.mark.django_db
def test_a_cuda_target_without_cupy_is_refused_up_front(monkeypatch):
    from kernels.backends import cuda

    def no_cupy():
        raise ImportError(f"{cuda.CUPY_HINT} (No module named 'cupy')", name="cupy")

    monkeypatch.setattr(cuda, "import_cupy", no_cupy)
    with pytest.raises(CommandError, match=r"cannot run target 'cuda-sm90': CuPy is not importable"):
        call_command("factory", "run", "--target", "cuda-sm90", "--budget", "2", "--json", stdout=StringIO())
    assert nothing_left()


@pytest.mark.django_db
def test_a_cuda_target_without_a_device_or_of_another_architecture_is_refused(monkeypatch):
    from kernels.backends import cuda

    class NoDevice(RuntimeError):
        pass

    def no_device(cp=None, device=0):
        raise NoDevice("cudaErrorNoDevice: no CUDA-capable device is detected")

    monkeypatch.setattr(cuda, "import_cupy", lambda: object())
    monkeypatch.setattr(cuda, "device_info", no_device)
    with pytest.raises(CommandError, match=r"cannot run target 'cuda-sm90': no usable CUDA device .*NoDevice"):
        call_command("factory", "run", "--target", "cuda-sm90", "--budget", "2", "--json", stdout=StringIO())
    monkeypatch.setattr(cuda, "device_info", lambda cp=None, device=0: {"gpu": "NVIDIA A100", "compute_capability": "8.0"})
    with pytest.raises(CommandError, match=r"the GPU is NVIDIA A100 \(sm_80\).*--target cuda-sm80"):
        call_command("factory", "run", "--target", "cuda-sm90", "--budget", "2", "--json", stdout=StringIO())
    assert nothing_left()


@pytest.mark.django_db
def test_factory_sweep_in_embedded_mode_is_refused(settings, monkeypatch):
    from swarm.runs import sweeper

    monkeypatch.setattr(sweeper, "recover", lambda: 4)
    settings.EMBEDDED = True
    with pytest.raises(CommandError, match=r"embedded mode.*manage.py serve"):
        call_command("factory", "sweep", stdout=StringIO())
    settings.EMBEDDED = False
    out = StringIO()
    call_command("factory", "sweep", stdout=out)
    assert "re-dispatched 4 candidates" in out.getvalue()
    with pytest.raises(CommandError, match=r"--every: "):
        call_command("factory", "sweep", "--every", "-1", stdout=StringIO())


@pytest.mark.django_db
def test_a_goal_made_for_a_run_that_start_run_refuses_is_removed_again(monkeypatch):
    from swarm.models import Goal

    def refuses(goal, **kw):
        raise ValueError("no point of the design space satisfies its restrictions: nothing to search")

    real = orchestrator.start_run
    monkeypatch.setattr(orchestrator, "start_run", refuses)
    with pytest.raises(CommandError, match="nothing to search"):
        call_command("factory", "run", *SMALL, stdout=StringIO())
    assert nothing_left()
    monkeypatch.setattr(orchestrator, "start_run", real)
    call_command("factory", "run", *SMALL, stdout=StringIO())  # the goal exists now: a refusal keeps it
    goal = Goal.objects.get()
    monkeypatch.setattr(orchestrator, "start_run", refuses)
    with pytest.raises(CommandError, match="nothing to search"):
        call_command("factory", "run", *SMALL, stdout=StringIO())
    assert list(Goal.objects.all()) == [goal]
