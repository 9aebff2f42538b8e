"""Engine plan tuning: engine shape sets, the fastest measured option per operator, the plan,
and what describe, the demo and the engine pages show."""

import sys

import pytest
from django.urls import reverse

from engines._binding import KernelSpec, StaticRegistry
from engines._shapes import operator_shapes, register_shape_sets, shape_set_name
from engines.registry import make_engine
from engines.tuning import TunedRegistry, new_state, step, tune
from kernels import Evidence, Outcome
from kernels.templates import load_template
from kernels.workloads import add_shape_set, get_workload

pytestmark = pytest.mark.timeout(600)


def test_engine_shape_sets_are_the_shapes_of_the_engines_operators():
    eng = make_engine("llama-layer", config="small")
    shapes = operator_shapes(eng)
    gemm = shapes["gemm"]
    ms = {s["M"] for s in gemm["shapes"]}
    assert {1, 24} <= ms, gemm  # decode (one token) and the 24-token prefill of the small config
    assert {"qkv_proj", "o_proj", "gate_up_proj", "down_proj"} == set(gemm["operators"])
    assert shapes["rmsnorm"]["attrs"] == {"eps": eng.cfg.eps}
    names = register_shape_sets("llama-layer", "small", shapes)
    assert names["gemm"] == shape_set_name("llama-layer", "small") == "engine-llama-layer-small"
    assert [dict(s) for s in get_workload("gemm").shapes("engine-llama-layer-small")] == gemm["shapes"]
    assert get_workload("rmsnorm").attrs_for("engine-llama-layer-small")["eps"] == eng.cfg.eps


def test_a_shape_set_with_wrong_axes_or_attributes_is_refused():
    with pytest.raises(ValueError, match="exactly the axes"):
        add_shape_set("gemm", "bad", [{"M": 1, "N": 2}])
    with pytest.raises(ValueError, match="no attribute"):
        add_shape_set("gemm", "bad", [{"M": 1, "N": 2, "K": 3}], attrs={"eps": 1e-5})
    with pytest.raises(ValueError, match="at least one"):
        add_shape_set("gemm", "bad", [])
    assert "bad" not in get_workload("gemm").shape_sets


def test_a_template_point_is_measured_by_the_sandboxed_evaluator_at_the_engines_shapes(quick_bench):
    calls = []

    def spy(workload, source, params, **kw):
        from kernels import evaluate

        calls.append((workload, kw["shape_set"]))
        return evaluate(workload, source, params, **kw)

    state = new_state("kda-layer", "small", template_points=1, plan_variants=1, bench=quick_bench.to_dict())
    step(state)  # shapes
    state["queue"] = [i for i in state["queue"] if i["workload"] == "rmsnorm" and i["kind"] == "template"]
    step(state, evaluate=spy)
    [opt] = state["options"]["rmsnorm"]
    assert calls == [("rmsnorm", "engine-kda-layer-small")]
    assert opt["kind"] == "template" and opt["status"] == "ok" and opt["latency_ms"] > 0


def _ev(ms, status=Outcome.ok):
    return Evidence(status=status, metrics={"latency_ms": ms} if status == Outcome.ok else {}, log=str(status))


def test_the_tuning_keeps_the_fastest_measured_option_per_operator_and_the_fastest_plan():
    """Stubbed measurements with known latencies: the tuning must pick each workload's
    minimum among the options that passed, then the fastest plan."""
    production = StaticRegistry({"rmsnorm": KernelSpec("rmsnorm", load_template("rmsnorm"), {}, origin="production",
                                                       candidate=41)})
    seen = []

    def evaluate(workload, source, params, **kw):
        seen.append((workload, dict(params), source == load_template(workload)))
        if workload == "kda":
            return _ev(0.5 if not params else 0.9)  # template defaults beat the baseline (2.0)
        if workload == "rmsnorm":
            if "ROWS_PER_CHUNK" in params:
                return _ev(0.01, Outcome.wrong_result)  # fastest, but wrong: never chosen
            return _ev(0.2)  # template defaults and the production kernel (same source): 0.2
        if workload == "gemm_bias":
            return _ev(0.3 if params else 0.6)  # a sampled point beats defaults and the baseline (0.4)
        return _ev(5.0)  # gemm: every template point slower than the baseline (1.0)

    baselines = {"kda": 2.0, "rmsnorm": 0.25, "gemm_bias": 0.4, "gemm": 1.0}

    def evaluate_plan(workload, source, params, **kw):
        assert isinstance(kw["registry"], TunedRegistry)
        return _ev(10.0 if params["FUSE_QKV"] else 7.0)

    state = tune("kda-layer", "small", registry=production, template_points=2, plan_variants=3, evaluate=evaluate,
                 time_baseline=lambda w, shape_set, bench: baselines[w], evaluate_plan=evaluate_plan)
    ch = state["choices"]
    assert ch["kda"]["kind"] == "template" and ch["kda"]["params"] == {} and ch["kda"]["choice"] == 1
    assert ch["gemm"]["kind"] == "baseline" and ch["gemm"]["choice"] == 0
    assert ch["gemm_bias"]["kind"] == "template" and ch["gemm_bias"]["params"] and ch["gemm_bias"]["latency_ms"] == 0.3
    # rmsnorm: production (0.2) ties the template defaults (0.2): the first measured of the
    # fastest wins; the wrong 0.01 never does.
    assert ch["rmsnorm"]["latency_ms"] == 0.2 and ch["rmsnorm"]["kind"] in ("template", "production")
    assert "fastest of 4 measured at engine-kda-layer-small" in ch["rmsnorm"]["why"] and "1 failed" in ch["rmsnorm"]["why"]
    assert ("rmsnorm", {}, True) in seen and len([s for s in seen if s[0] == "rmsnorm"]) == 3  # 2 points + production
    assert state["plan"]["FUSE_QKV"] == 0 and state["plan"]["KERNEL_GEMM"] == 0 and state["plan"]["KERNEL_KDA"] == 1
    assert state["phase"] == "done" and state["done_steps"] == state["total_steps"]

    # The engine bound with the tuning runs what was chosen, and describe says why.
    eng = make_engine("kda-layer", config="small", registry=TunedRegistry(production, ch))
    graph = eng.describe(eng.plan(state["plan"]))
    kernels = {r["workload"]: r["kernel"] for rows in graph.values() for r in rows if r["workload"]}
    assert kernels["kda"]["kind"] == "template" and "fastest of" in kernels["kda"]["note"]
    assert kernels["gemm"]["kind"] == "baseline" and kernels["gemm"]["note"].startswith("baseline: fastest")
    assert kernels["gemm_bias"]["params"] == ch["gemm_bias"]["params"]
    assert "template point" in kernels["gemm_bias"]["note"]


def test_describe_on_the_command_line_shows_each_operators_kernel_and_why(capsys):
    from engines.cli import main

    assert main(["describe", "--engine", "kda-layer", "--config", "small"]) == 0
    out = capsys.readouterr().out
    assert "no production kernel for gemm on cpu-x86_64: NumPy baseline" in out


def test_an_engine_whose_extra_is_missing_is_a_one_line_error(capsys, monkeypatch):
    from engines.cli import main

    monkeypatch.setitem(sys.modules, "safetensors", None)  # as without `pip install -e '.[engines]'`
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    assert main(["describe", "--engine", "minilm"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the MiniLM engine needs ") and "'.[engines]'" in err and "Traceback" not in err


@pytest.mark.django_db
def test_the_demo_registers_the_engines_and_queues_a_plan_tuning_of_each():
    from django.core.management import call_command

    from swarm.engine_registry.models import EnginePlanTuning, ProductionEngine

    call_command("setup_demo")
    names = set(ProductionEngine.objects.values_list("name", flat=True))
    assert {"llama-layer-small/cpu-x86_64", "kda-layer-small/cpu-x86_64"} <= names
    tunings = EnginePlanTuning.objects.all()
    assert {t.engine.name for t in tunings} == names and {t.status for t in tunings} == {"queued"}
    call_command("setup_demo")  # idempotent: no second engine, no second tuning
    assert EnginePlanTuning.objects.count() == len(names) == ProductionEngine.objects.count()


@pytest.fixture
def tuned_engine(db):
    """kda-layer small tuned step by step through the worker's code path, measurements stubbed."""
    from swarm.engine_registry.services import register_engine
    from swarm.engine_registry.tuning import run_step, start_tuning

    pe, _ = register_engine("kda-layer", config="small")
    t = start_tuning(pe, dispatch_now=False, template_points=1, plan_variants=2, plan_reps=1)
    hooks = {"evaluate": lambda w, s, p, **kw: _ev(0.1 if w == "kda" else 9.0),
             "time_baseline": lambda w, shape_set, bench: 1.0,
             "evaluate_plan": lambda w, s, p, **kw: _ev(3.0 if p["FUSE_QKV"] else 4.0)}
    steps = 0
    while t.status not in ("done", "failed"):
        t = run_step(t.pk, t.state["done_steps"], chain=False, **hooks)
        steps += 1
        assert steps < 50
    assert t.status == "done", t.error
    pe.refresh_from_db()
    return pe, t


@pytest.mark.django_db
def test_a_finished_tuning_becomes_the_engines_plan_and_the_pages_show_each_operators_kernel(client, owner,
                                                                                            tuned_engine):
    from swarm.engine_registry.tuning import run_step

    pe, t = tuned_engine
    assert pe.plan["KERNEL_KDA"] == 1 and pe.plan["KERNEL_GEMM"] == 0 and pe.kernel_points["kda"]["kind"] == "template"
    assert run_step(t.pk, 0) is None  # a duplicate message of a done step does nothing
    bench = pe.latest()
    assert bench.trigger == "tuning" and bench.status == "ok"
    kda_ops = [r for rows in bench.graph.values() for r in rows if r["workload"] == "kda"]
    assert kda_ops and all(r["kernel"]["kind"] == "template" and "fastest of" in r["kernel"]["note"] for r in kda_ops)
    client.force_login(owner)
    page = client.get(reverse("engine-list")).content.decode()
    assert f"kernels-{pe.pk}" in page and "template defaults" in page and "kernel-template" in page
    assert "baseline: fastest of 2 measured at engine-kda-layer-small" in page
    assert "template point defaults: fastest of 2 measured" in page
    page = client.get(reverse("engine-detail", args=[pe.pk])).content.decode()
    for text in ("plan-tuning", "tuning-options", "tuning-plans", "engine-kda-layer-small", "chosen",
                 "template point defaults: fastest"):
        assert text in page, text


@pytest.mark.django_db
def test_the_engines_page_shows_a_running_tuning_and_untuned_choices(client, owner):
    from swarm.engine_registry.services import register_engine
    from swarm.engine_registry.tuning import start_tuning

    pe, _ = register_engine("llama-layer", config="small")
    start_tuning(pe, dispatch_now=False)
    client.force_login(owner)
    page = client.get(reverse("engine-list")).content.decode()
    assert 'data-refresh-s="10"' in page and "queued" in page and "step 0" in page
    assert "no production kernel for gemm on cpu-x86_64: NumPy baseline (not measured at the engine&#x27;s shapes yet)" in page


@pytest.mark.django_db
def test_queued_tunings_are_recovered_after_a_restart(monkeypatch):
    from swarm.engine_registry import tuning as tuning_mod
    from swarm.engine_registry.services import register_engine

    sent = []
    monkeypatch.setattr(tuning_mod, "dispatch", lambda t: sent.append((t.pk, t.state["done_steps"])))
    pe, _ = register_engine("kda-layer", config="small")
    t = tuning_mod.start_tuning(pe, dispatch_now=False)
    assert tuning_mod.recover() == 1 and sent == [(t.pk, 0)]
    t.status = "running"
    t.save()
    assert tuning_mod.recover() == 0  # running and recently stepped: its message is in flight
    assert tuning_mod.recover(stale_s=-1) == 1


@pytest.mark.django_db
def test_tuning_steps_go_to_the_queue_the_engines_target_worker_consumes(settings):
    from swarm.engine_registry.services import register_engine
    from swarm.engine_registry.tuning import queue_for
    from swarm.runs.dispatch import EMBEDDED_QUEUE

    pe, _ = register_engine("kda-layer", config="small")
    settings.EMBEDDED = True
    assert queue_for(pe) == EMBEDDED_QUEUE
    settings.EMBEDDED = False
    assert queue_for(pe) == "target.cpu-x86_64"


@pytest.mark.django_db
def test_engine_serve_without_the_engines_extra_is_a_one_line_error(monkeypatch):
    from django.core.management import CommandError, call_command

    monkeypatch.setitem(sys.modules, "safetensors", None)  # as without `pip install -e '.[engines]'`
    monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
    with pytest.raises(CommandError, match=r"the MiniLM engine needs .*'\.\[engines\]'"):
        call_command("engine", "serve", "--engine", "minilm", "--port", "8199")
