"""The Llama-3-8B decoder layer and the Kimi Linear KDA layer validate end to end against
float64 models (reduced dimensions on CPU), under every kind of plan."""

import json
import subprocess
import sys

import numpy as np
import pytest

from engines._graph import Profile
from engines._reference import kda_layer64, shared_kda_reference
from engines._validate import LAYER_TOLERANCE, validate
from engines.kda_layer import KdaLayer, split_weights
from engines.llama import CONFIGS, LlamaLayer, residual_stream

pytestmark = pytest.mark.timeout(300)

ALL_TEMPLATES = "templates"


def plans(engine):
    spec = engine.plan_spec
    return {
        "default": {},
        "unfused": {**{f: 0 for f in spec.fusions}, "BUFFER_REUSE": 0},
        ALL_TEMPLATES: {f"KERNEL_{w.upper()}": 1 for w in spec.workloads},
    }


@pytest.fixture(scope="module")
def llama():
    return LlamaLayer("small")


@pytest.fixture(scope="module")
def kda():
    return KdaLayer("small")


@pytest.mark.parametrize("plan", ["default", "unfused", ALL_TEMPLATES])
def test_the_llama_layer_validates_prefill_and_decode(llama, plan):
    res = validate("llama-layer", engine=llama, plan=plans(llama)[plan], prompt=20, decode_steps=3)
    assert res["status"] == "ok", res
    assert res["max_rel_error"] <= LAYER_TOLERANCE and res["max_rel_error_decode"] <= LAYER_TOLERANCE
    if plan == ALL_TEMPLATES:
        assert set(res["kernels"].values()) == {"template"}


@pytest.mark.parametrize("plan", ["default", "unfused", ALL_TEMPLATES])
def test_the_kda_layer_validates_prefill_and_decode(kda, plan):
    res = validate("kda-layer", engine=kda, plan=plans(kda)[plan], prompt=70, decode_steps=3)  # > one 64-chunk
    assert res["status"] == "ok", res


def test_a_batch_of_sequences_validates(llama, kda):
    assert validate("llama-layer", engine=llama, prompt=9, decode_steps=2, batch=2)["status"] == "ok"
    assert validate("kda-layer", engine=kda, prompt=9, decode_steps=2, batch=2)["status"] == "ok"


def test_the_real_llama_dimensions_are_the_model_cards():
    c = CONFIGS["llama3-8b"]
    assert (c.hidden, c.heads, c.kv_heads, c.head_dim, c.inter, c.rope_theta) == (4096, 32, 8, 128, 14336, 500000.0)


def test_the_layer_validation_catches_a_broken_kv_cache(llama, monkeypatch):
    import engines.llama as L

    monkeypatch.setattr(L, "_cache_append", lambda k, v, cache: ())  # decode forgets to store the new token
    llama._programs.clear()
    try:
        res = validate("llama-layer", engine=llama, prompt=12, decode_steps=3)
    finally:
        llama._programs.clear()
    assert res["status"] == "wrong_result" and res["max_rel_error_decode"] > 1e-2
    assert res["max_rel_error_prefill"] <= LAYER_TOLERANCE


def test_the_kda_core_matches_the_shared_reference_with_a_carried_state(kda):
    ref = shared_kda_reference()
    if ref is None:
        pytest.skip("shared/reference/kda_reference.py not available")
    c = kda.cfg
    x = np.random.default_rng(4).standard_normal((50, c.hidden)).astype(np.float32)
    w = split_weights(kda.weights, c)
    own, shared = kda_layer64(x, w, c), kda_layer64(x, w, c, core="shared")
    assert np.abs(own - shared).max() <= 1e-10 * np.abs(own).max()
    # the engine's prefill state continues like the shared decode step
    st = kda.new_state(1)
    kda.prefill(x[None, :40], None, st)
    ins = ref.make_inputs(B=1, T=1, H=c.heads, K=c.head_dim, V=c.head_dim, seed=1, dtype=np.float64)
    S0 = st.S.astype(np.float64)[None]
    o1, S1 = ref.kda_decode_step(ins["q"][:, 0], ins["k"][:, 0], ins["v"][:, 0], ins["g"][:, 0], ins["beta"][:, 0], S0)
    from engines.kda_layer import _kda_step

    class St:
        S = st.S.copy()

    q, k, v, g = (np.moveaxis(ins[n][0], 0, 1).astype(np.float32) for n in ("q", "k", "v", "g"))
    o2 = _kda_step(q, k, v, g, ins["beta"][0].T.astype(np.float32), St)
    assert np.abs(o2[:, 0] - o1[0]).max() <= 1e-4 * np.abs(o1).max()
    assert np.abs(St.S - S1[0]).max() <= 1e-4 * np.abs(S1).max()


def test_the_profile_breaks_the_time_down_per_operator(llama):
    prof = Profile()
    x = residual_stream(np.random.default_rng(0), 8, llama.cfg.hidden)
    llama.prefill(x[None], None, profile=prof)
    rows = prof.breakdown()
    labels = {r["label"] for r in rows}
    assert {"qkv_proj", "attention", "gate_up_proj", "down_proj", "swiglu", "rope"} <= labels
    assert abs(sum(r["share"] for r in rows) - 1.0) < 1e-9 and all(r["ms"] >= 0 for r in rows)


def test_reused_buffers_never_leak_into_returned_outputs(llama):
    x = residual_stream(np.random.default_rng(1), 6, llama.cfg.hidden)[None]
    a = llama.prefill(x, {"BUFFER_REUSE": 1})
    b = llama.prefill(x * 2, {"BUFFER_REUSE": 1})
    assert not np.shares_memory(a, b) and not np.allclose(a, b)
    assert np.array_equal(a, llama.prefill(x, {"BUFFER_REUSE": 1}))


def test_a_bad_plan_is_refused_with_the_allowed_values(llama):
    with pytest.raises(ValueError, match="FUSE_QKV=3 must be one of"):
        llama.plan({"FUSE_QKV": 3})
    with pytest.raises(ValueError, match="unknown plan parameter 'FUSE_EVERYTHING'"):
        llama.plan({"FUSE_EVERYTHING": 1})


@pytest.mark.parametrize("engine", ["llama-layer", "kda-layer"])
def test_the_cli_prints_one_json_object_with_the_agreement(engine):
    out = subprocess.run([sys.executable, "-m", "engines", "validate", "--engine", engine, "--json"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["status"] == "ok" and res["max_rel_error"] <= LAYER_TOLERANCE


def test_the_cli_bench_reports_latencies_against_numpy():
    out = subprocess.run([sys.executable, "-m", "engines", "bench", "--engine", "llama-layer", "--config", "small",
                          "--rounds", "1", "--prompt", "8", "--decode-steps", "2", "--threads", "1", "--json"],
                         capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert set(res["latency"]) >= {"numpy", "default", "templates", "unfused"}
    assert res["latency"]["default"]["prefill_ms"] > 0 and res["latency"]["numpy"]["decode_ms_per_token"] > 0
    assert res["breakdown"]["decode"] and res["env"]["threads"] == 1


def test_an_unknown_config_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "engines", "validate", "--engine", "kda-layer", "--config", "huge"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "has no config 'huge'" in out.stderr


def test_importing_the_package_loads_no_numpy_so_the_cli_can_set_threads_first():
    out = subprocess.run([sys.executable, "-c", "import sys, engines; print('numpy' in sys.modules); "
                          "from engines import Plan; print(Plan.__name__)"], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["False", "Plan"], out.stderr


@pytest.mark.parametrize("content, expected", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ('{"results": 3}', "holds no list of production kernels"),
    ('[{"workload": "gemm"}]', "entry 0 of"),
    ('[{"workload": "gemm", "source": "x", "params": [1]}]', "'params' that are not an object"),
    ('["gemm"]', "entry 0 of"),
    ('[{"workload": "rmsnorm", "source": "x", "evidence": [1]}]', "entry 0 of"),
    ('[{"workload": "rmsnorm", "source": "x", "evidence": [1]}]', "'evidence' that is not an object"),
    ('[{"workload": "rmsnorm", "source": "x", "validated_shapes": 5}]', "'validated_shapes' that are not a list"),
    ('[{"workload": "rmsnorm", "source": "x", "validated_shapes": [5]}]', "validated_shapes[0] that is not an object"),
    ('[{"workload": "rmsnorm", "source": "x", "validated_shapes": [{"hidden": 1e400}]}]', "hidden=inf, not an integer"),
    ('[{"workload": "rmsnorm", "source": "x", "validated_shapes": [{"hidden": null}]}]', "hidden=None, not an integer"),
    ('[{"workload": "rmsnorm", "source": "x", "validated_shapes": {"hidden": "abc"}}]', "that are not a list"),
    ('[{"workload": "rmsnorm", "source": "x", "validated_shapes": [{"hidden": "abc"}]}]', "hidden='abc', not an integer"),
    ('[{"workload": "rmsnorm", "source": "x", "validated_shapes": [{"hidden": true}]}]', "hidden=True, not an integer"),
    ('[{"workload": "gemm", "source": "x"}, {"workload": "rmsnorm", "source": "x", "library": 5}]',
     "entry 1 of"),
    ('[{"workload": "rmsnorm", "source": "x", "library": 5}]', "'library' that is not a string"),
    ('[{"workload": "rmsnorm", "source": "x", "library": "/no/such/kernel.so"}]', "'library' that names no file"),
    ('[{"workload": "rmsnorm", "source": "x", "hash": ["a"]}]', "'hash' that is not a string"),
    ('[{"workload": "rmsnorm", "source": "x", "shape_set": 3}]', "'shape_set' that is not a string"),
    ('[{"workload": "rmsnorm", "source": "x", "params": {"BLOCK": "big"}}]', "'params' that are not #define values"),
    pytest.param("[" * 100000, "nested too deeply", id="deeply-nested"),
])
def test_a_bad_production_file_is_a_one_line_usage_error(tmp_path, capsys, content, expected):
    from engines.cli import main

    path = tmp_path / "production.json"
    if content is not None:
        path.write_text(content)
    assert main(["describe", "--engine", "kda-layer", "--config", "small", "--production", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --production: ") and expected in err and "Traceback" not in err
    assert err.count("\n") == 1 and str(path) in err


@pytest.mark.parametrize("argv, expected", [
    (["bench", "--engine", "llama-layer", "--threads", "0"], "--threads: must be 1-1024, not 0"),
    (["bench", "--engine", "llama-layer", "--threads", "99999999999999999999"],
     "--threads: must be 1-1024, not 99999999999999999999"),
    (["bench", "--engine", "llama-layer", "--threads", "many"], "--threads: 'many' is not an integer"),
    (["validate", "--engine", "kda-layer", "--prompt", "0"], "--prompt: must be 1-32768, not 0"),
    (["bench", "--engine", "llama-layer", "--prompt", "1000000000000"], "--prompt: must be 1-32768, not 1000000000000"),
    (["validate", "--engine", "kda-layer", "--decode-steps", "4097"], "--decode-steps: must be 1-4096, not 4097"),
    (["bench", "--engine", "kda-layer", "--decode-steps", "100000000"], "--decode-steps: must be 1-4096, not 100000000"),
    (["bench", "--engine", "llama-layer", "--rounds", "-2"], "--rounds: must be 1-1000, not -2"),
    (["bench", "--engine", "llama-layer", "--rounds", "1001"], "--rounds: must be 1-1000, not 1001"),
    (["describe", "--engine", "kda-layer", "--target", "cpu-aarch64"], "--target selects production kernels"),
    (["describe", "--engine", "kda-layer", "--target", "cpu-x86-64", "--production", "unread.json"],
     "the only target they can run is cpu-"),
    (["describe", "--engine", "kda-layer", "--plan", '{"FUSE_QKV": 1e400}'], "FUSE_QKV=inf is not an integer"),
    (["describe", "--engine", "kda-layer", "--plan", '{"FUSE_QKV": 1.5}'], "FUSE_QKV=1.5 is not an integer"),
    (["describe", "--engine", "kda-layer", "--plan", '{"FUSE_QKV": true}'], "FUSE_QKV=True is not an integer"),
    pytest.param(["describe", "--engine", "kda-layer", "--plan", "[" * 50000], "--plan: nested too deeply",
                 id="deeply-nested-plan"),
])
def test_counts_out_of_bounds_bad_plans_and_targets_are_usage_errors(capsys, argv, expected):
    from engines.cli import main

    with pytest.raises(SystemExit) as exit_:
        code = main(argv)
        raise SystemExit(code)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_a_plan_value_must_be_an_integer_but_an_integral_float_is_one(llama):
    assert llama.plan({"FUSE_QKV": 0.0}).params["FUSE_QKV"] == 0
    for bad in (1.5, float("inf"), float("nan"), True, "1", None):
        with pytest.raises(ValueError, match=r"FUSE_QKV=.* is not an integer: it must be one of \[0, 1\]"):
            llama.plan({"FUSE_QKV": bad})


@pytest.mark.parametrize("command", ["describe", "validate"])
def test_a_production_kernel_that_does_not_compile_is_a_one_line_usage_error(tmp_path, capsys, command):
    from engines.cli import main

    path = tmp_path / "production.json"  # covers the small layer's RMSNorm (hidden=256), so it is compiled
    path.write_text(json.dumps([{"workload": "rmsnorm", "source": "this is not C", "validated_shapes": [{"hidden": 256}]}]))
    assert main([command, "--engine", "llama-layer", "--production", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: the production kernel of rmsnorm does not compile: compiler exited with code 1")
    assert "unknown type name" in err and err.count("\n") == 1 and "Traceback" not in err


def test_the_notes_name_the_target_given_and_only_this_hosts_cpu_target_is_accepted(tmp_path, capsys):
    import platform

    from engines.cli import main

    host = f"cpu-{platform.machine()}"
    path = tmp_path / "production.json"
    path.write_text(json.dumps([{"workload": "rmsnorm", "target": host, "source": "x", "shape_set": "none"}]))
    assert main(["describe", "--engine", "kda-layer", "--production", str(path), "--target", host, "--json"]) == 0
    notes = [r["kernel"]["note"] for rows in json.loads(capsys.readouterr().out)["graph"].values()
             for r in rows if r["workload"] == "gemm"]
    assert notes and all(f"no production kernel for gemm on {host}" in n for n in notes)
    typo = host.replace("_", "-") if "_" in host else host + "x"
    assert main(["describe", "--engine", "kda-layer", "--production", str(path), "--target", typo]) == 2
    assert capsys.readouterr().err == (f"error: --target {typo!r}: the engines run their kernels in this process, "
                                       f"on this host's CPU; the only target they can run is {host}\n")


def test_a_run_that_does_not_fit_in_memory_is_a_one_line_usage_error(monkeypatch, capsys):
    import engines._validate
    from engines.cli import main

    def out_of_memory(*args, **kw):
        raise MemoryError

    monkeypatch.setattr(engines._validate, "validate", out_of_memory)
    assert main(["validate", "--engine", "kda-layer"]) == 2
    assert capsys.readouterr().err.startswith("error: the run does not fit in memory")


def test_the_command_refuses_a_thread_count_past_the_bound_before_any_runtime_sees_it():
    out = subprocess.run([sys.executable, "-m", "engines", "bench", "--engine", "llama-layer", "--threads",
                          "99999999999999999999"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--threads: must be 1-1024" in out.stderr
    assert "Traceback" not in out.stderr and "libgomp" not in out.stderr


def test_a_saved_api_production_response_is_a_production_file(tmp_path, capsys):
    """``GET /api/production/`` answers ``{"kernels": [...]}``: saved as it is, it is read."""
    from engines.cli import main
    from kernels.templates import load_template

    path = tmp_path / "production.json"
    path.write_text(json.dumps({"kernels": [{"workload": "rmsnorm", "target": "cpu-x86_64", "candidate": 7,
                                             "source": load_template("rmsnorm"), "params": {}}]}))
    assert main(["describe", "--engine", "llama-layer", "--config", "small", "--production", str(path)]) == 0
    assert "no production kernel of rmsnorm on cpu-x86_64 covers this operator (candidate 7" in capsys.readouterr().out


def test_bench_without_pytorch_is_a_one_line_error(monkeypatch, capsys):
    import importlib.util

    from engines.cli import main

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    assert main(["bench", "--engine", "llama-layer", "--config", "small", "--rounds", "1", "--prompt", "8",
                 "--decode-steps", "2", "--threads", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: bench measures the engine beside PyTorch") and "Traceback" not in err
