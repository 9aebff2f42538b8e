"""An engine plan (an engine goal's candidate) is validated and timed in a sandbox child confined
as the evaluator's (user, namespaces, Landlock, seccomp, limits, empty environment): the
production kernels it binds never run in the calling process, and a child's crash, timeout
or compile failure is the plan's evidence, not an exception."""

import secrets
from pathlib import Path

import pytest

from engines._binding import NoProduction, StaticRegistry
from engines._plan import Plan
from engines._plan_registry import PlanRegistry, plan_kernels
from engines._tuned import TunedRegistry
from engines.goals import evaluate_plan
from engines.registry import engine_class
from kernels import Outcome, load_template
from swarm.engine_registry import goals as swarm_goals
from swarm.models import Promotion
from tests.engines.test_guard import make_candidate
from tests.engines.test_guard_sandbox import READS_THE_ENVIRONMENT
from tests.kernels.test_hostile_cpu import NEEDS_THE_NETWORK, NEVER_RETURNS, SEGFAULTS, WRITES_OUTSIDE, _Listener

pytestmark = pytest.mark.timeout(600)

PROJECT = Path(__file__).resolve().parents[2]
WORKLOAD = "engine:llama-layer:small"


def production(source, params=None, workload="rmsnorm"):
    """A registry whose one production kernel (``workload``, candidate 9) is ``source``."""
    return StaticRegistry([{"workload": workload, "target": "cpu-x86_64", "shape_set": "test-small", "source": source,
                            "params": params or {}, "candidate": 9, "hash": "h"}])


def evaluate(registry, params=None, **kw):
    return evaluate_plan(WORKLOAD, "", params or {}, shape_set="decode", reps=3, registry=registry, **kw)


def confined(ev):
    sb = ev.fingerprint["sandbox"]
    assert sb["network"] in ("namespace", "user-namespace")
    assert sb["filesystem"] in ("landlock", "mount-namespace")
    assert "socket" in sb["seccomp"] and "fork" in sb["seccomp"]
    assert sb["user"]["uid"] != 0


def test_a_plans_production_kernel_cannot_write_outside_its_directory():
    token = secrets.randbelow(10**9)
    files = [Path(f"/tmp/pwned-{token}"), PROJECT / f"pwned-{token}"]
    source = f'#define PROJECT_DIR "{PROJECT}"\n' + WRITES_OUTSIDE
    try:
        ev = evaluate(production(source, {"TOKEN": token}))
        assert not any(f.exists() for f in files)
        confined(ev)
        assert ev.fingerprint["kernels"]["rmsnorm"] == "production (candidate 9)"
        assert ev.status == Outcome.wrong_result, ev.log  # correct only where the writes succeed
    finally:
        for f in files:
            f.unlink(missing_ok=True)


def test_a_plans_production_kernel_cannot_reach_the_network():
    listener = _Listener()
    try:
        ev = evaluate(production(NEEDS_THE_NETWORK, {"PORT": listener.port}))
        assert listener.accepted == 0
        confined(ev)
        assert ev.status == Outcome.wrong_result, ev.log
    finally:
        listener.close()


def test_a_plans_production_kernel_sees_an_empty_environment(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/prod")
    ev = evaluate(production(READS_THE_ENVIRONMENT))
    assert ev.status == Outcome.ok, ev.log
    confined(ev)
    assert ev.fingerprint["kernels"]["rmsnorm"] == "production (candidate 9)"
    assert ev.metrics["latency_ms[decode]"] > 0 and len(ev.samples_ms["decode"]) == 3


def test_a_crashing_kernel_is_a_runtime_error_of_the_plan():
    ev = evaluate(production(SEGFAULTS))
    assert ev.status == Outcome.runtime_error
    assert "SIGSEGV" in ev.log and ev.fingerprint["sandbox"].get("seccomp")


def test_a_kernel_that_never_returns_is_a_timeout_of_the_plan():
    ev = evaluate(production(NEVER_RETURNS), timeout_s=20.0)
    assert ev.status == Outcome.timeout, ev.log
    assert "20 s" in ev.log and ev.duration_s < 60


def test_a_kernel_that_does_not_compile_is_a_compile_error_of_the_plan():
    ev = evaluate(production("this is not C"))
    assert ev.status == Outcome.compile_error
    assert "production kernel of rmsnorm (candidate 9) does not compile" in ev.log


def test_templates_and_a_tunings_template_point_are_compiled_by_the_parent_and_bound_in_the_child():
    point = {"ROWS_PER_CHUNK": 2, "UNROLL": 2, "VEC": 4, "ACC_DOUBLE": 1}
    choices = {"rmsnorm": {"choice": 1, "kind": "template", "params": point, "shape_set": "s", "why": "measured fastest"}}
    ev = evaluate(TunedRegistry(NoProduction(), choices), {"KERNEL_RMSNORM": 1, "KERNEL_SWIGLU": 1})
    assert ev.status == Outcome.ok, ev.log
    assert ev.fingerprint["kernels"]["rmsnorm"] == "template" and ev.fingerprint["kernels"]["swiglu"] == "template"
    assert ev.fingerprint["bound"]["templates"] == {"rmsnorm": point, "swiglu": {}}
    assert ev.fingerprint["kernels"]["gemm"] == "baseline"  # production choice, nothing in production


def test_the_child_binds_what_the_calling_process_would():
    src = load_template("rmsnorm")
    base = StaticRegistry([
        {"workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "test-small", "source": src, "params": {},
         "candidate": 1},
        {"workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "other", "source": src, "params": {"VEC": 4},
         "candidate": 2, "validated_shapes": [{"hidden": 256}]},
        {"workload": "rmsnorm", "target": "gpu", "shape_set": "x", "source": src, "candidate": 3}], target="cpu-x86_64")
    choices = {"gemm": {"choice": 1, "kind": "template", "params": {}, "why": "template was fastest"},
               "rmsnorm": {"choice": 2, "kind": "production", "candidate": 1, "shapes": [{"rows": 7, "hidden": 256}],
                           "why": "production #1 was fastest"}}
    registry = TunedRegistry(base, choices)
    plan = Plan.parse(engine_class("llama-layer").plan_spec, {"KERNEL_GEMM": 1, "KERNEL_ROPE": 0})
    kernels = plan_kernels(registry, plan, engine_class("llama-layer").plan_spec.workloads, "cpu-x86_64")
    assert set(kernels["production"]) == {"rmsnorm"} and set(kernels["templates"]) == {"gemm"}
    child = PlanRegistry(kernels)
    assert child.specs("rmsnorm", "cpu-x86_64") == registry.specs("rmsnorm", "cpu-x86_64")
    assert [s.candidate for s in child.specs("rmsnorm", "cpu-x86_64")] == [2, 1]
    assert child.template_point("gemm", "cpu-x86_64", {}) == registry.template_point("gemm", "cpu-x86_64", {})
    assert child.why("rmsnorm", 2) == "production #1 was fastest" and child.why("rmsnorm", 1) is None
    assert child.why("gemm", 1) == "template was fastest" and child.specs("rope", "cpu-x86_64") == []


@pytest.mark.django_db
def test_the_swarms_plan_evaluation_runs_the_databases_production_kernel_confined(owner):
    token = secrets.randbelow(10**9)
    files = [Path(f"/tmp/pwned-{token}"), PROJECT / f"pwned-{token}"]
    cand = make_candidate(owner, f'#define PROJECT_DIR "{PROJECT}"\n' + WRITES_OUTSIDE, {"TOKEN": token}, "rmsnorm")
    Promotion.objects.create(candidate=cand, workload="rmsnorm", target="cpu-x86_64", shape_set="test-small")
    try:
        ev = swarm_goals.evaluate_plan(WORKLOAD, "", {}, shape_set="decode", reps=3)
        assert not any(f.exists() for f in files)
        confined(ev)
        assert ev.fingerprint["kernels"]["rmsnorm"] == f"production (candidate {cand.pk})"
        assert ev.status == Outcome.wrong_result, ev.log
    finally:
        for f in files:
            f.unlink(missing_ok=True)
