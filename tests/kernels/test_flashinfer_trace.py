"""FlashInfer Trace definitions import as shape sets; candidates export as Solutions and Traces."""

import json
import shutil

import pytest

from kernels import WORKLOADS, Evidence, Outcome, config, evaluate, load_template
from kernels.interchange.flashinfer_trace import (
    DEFINITION_MAP,
    STATUS_MAP,
    FlashInferTraceError,
    entry_shape,
    export_solution,
    export_trace,
    import_shape_sets,
    load_definitions,
    load_workloads,
)

DATA = config.flashinfer_trace_dir()  # KERNELS_FLASHINFER_TRACE_DIR or shared/datasets/flashinfer-trace
pytestmark = pytest.mark.skipif(DATA is None, reason="shared/datasets/flashinfer-trace not found")

PARAMS = {"ROWS_PER_CHUNK": 4, "UNROLL": 2, "VEC": 8, "ACC_DOUBLE": 0}
SOLUTION_KEYS = {"name", "definition", "author", "description", "spec", "sources"}
SPEC_KEYS = {"language", "target_hardware", "entry_point", "dependencies", "destination_passing_style"}
TRACE_KEYS = {"definition", "solution", "workload", "evaluation"}


def strict_json(record: dict) -> dict:
    """Round-trip through strict JSON (no NaN/inf literals)."""
    return json.loads(json.dumps(record, allow_nan=False))


@pytest.fixture(scope="module")
def rmsnorm_evidence():
    """The rmsnorm template evaluated on llama3-8b shapes (rows 1, 32, 512; hidden 4096)."""
    from kernels import BenchSettings

    bench = BenchSettings(warmup_ms=1.0, rep_ms=2.0, min_reps=3, max_reps=5, flush_bytes=1 << 20)
    ev = evaluate("rmsnorm", load_template("rmsnorm"), PARAMS, shape_set="llama3-8b", bench=bench, seed=5, timeout_s=60)
    assert ev.status == Outcome.ok, ev.log
    return ev


def batch_entry(n: int):
    return next(e for e in load_workloads()["rmsnorm_h4096"] if e.axes["batch_size"] == n)


# -- import ----------------------------------------------------------------------------------


def test_all_definitions_and_workload_entries_load():
    definitions = load_definitions()
    workloads = load_workloads()
    assert len(definitions) == 10
    assert sum(len(v) for v in workloads.values()) == 114
    assert {k: len(v) for k, v in workloads.items()} == {
        "gemm_n4096_k4096": 43, "gemm_n6144_k4096": 43, "rmsnorm_h4096": 14, "fused_add_rmsnorm_h4096": 14,
    }
    rms = definitions["rmsnorm_h4096"]
    assert rms.op_type == "rmsnorm" and rms.const_axes == {"hidden_size": 4096} and rms.var_axes == ("batch_size",)
    assert rms.inputs["hidden_states"]["dtype"] == "bfloat16" and "def run" in rms.reference


def test_mapped_definitions_become_shape_sets_of_our_workloads():
    sets = import_shape_sets()
    assert set(sets) == set(DEFINITION_MAP)
    assert {k: v.workload for k, v in sets.items()} == {
        "gemm_n4096_k4096": "gemm", "gemm_n6144_k4096": "gemm",
        "rmsnorm_h4096": "rmsnorm", "fused_add_rmsnorm_h4096": "fused_add_rmsnorm",
    }
    for s in sets.values():
        assert s.registered == (s.workload in WORKLOADS)


@pytest.mark.parametrize("definition, n", [("gemm_n4096_k4096", 4096), ("gemm_n6144_k4096", 6144)])
def test_gemm_shapes_fix_n_and_k_and_take_m_from_the_workloads(definition, n):
    s = import_shape_sets()[definition]
    ms = sorted({e.axes["M"] for e in load_workloads()[definition]})
    assert [shape["M"] for shape in s.shapes] == ms
    assert all(shape == {"M": shape["M"], "N": n, "K": 4096} and list(shape) == ["M", "N", "K"] for shape in s.shapes)
    assert s.dtypes == {"A": "float16", "B": "float16", "C": "float16"}
    assert sum(len(u) for u in s.uuids.values()) == 43


def test_rmsnorm_shapes_use_our_axis_names():
    s = import_shape_sets()["rmsnorm_h4096"]
    assert s.registered and s.name == "rmsnorm_h4096"
    assert s.shapes[0] == {"rows": 1, "hidden": 4096}
    assert [x["rows"] for x in s.shapes] == sorted({e.axes["batch_size"] for e in load_workloads()["rmsnorm_h4096"]})
    ours = {k for shapes in WORKLOADS["rmsnorm"].shape_sets.values() for shape in shapes for k in shape}
    assert set(s.shapes[0]) == ours
    assert s.uuids["rows=1,hidden=4096"] == (batch_entry(1).uuid,)


def test_entry_shape_converts_one_entry():
    d = load_definitions()["rmsnorm_h4096"]
    assert entry_shape(d, batch_entry(7)) == {"rows": 7, "hidden": 4096}
    assert entry_shape(d, batch_entry(7).raw) == {"rows": 7, "hidden": 4096}
    with pytest.raises(FlashInferTraceError, match="no mapping"):
        entry_shape(load_definitions()["gdn_decode_qk16_v32_d128_k_last"], {"uuid": "u", "axes": {}})


def test_the_folder_is_configurable(tmp_path, monkeypatch):
    for sub in ("definitions/rmsnorm", "workloads/rmsnorm"):
        shutil.copytree(DATA / sub, tmp_path / sub)
    monkeypatch.setenv("KERNELS_FLASHINFER_TRACE_DIR", str(tmp_path))
    assert set(load_definitions()) == {"rmsnorm_h4096", "fused_add_rmsnorm_h4096"}
    assert set(import_shape_sets()) == {"rmsnorm_h4096", "fused_add_rmsnorm_h4096"}
    assert len(load_definitions(DATA)) == 10


def test_malformed_files_are_named(tmp_path):
    (tmp_path / "workloads" / "x").mkdir(parents=True)
    (tmp_path / "workloads" / "x" / "bad.jsonl").write_text('{"definition": "d", "workload": {"axes": {}}}\n')
    with pytest.raises(FlashInferTraceError, match="bad.jsonl:1"):
        load_workloads(tmp_path)


def test_the_imported_definitions_are_shape_sets_of_the_registered_workloads():
    rms, gemm = WORKLOADS["rmsnorm"], WORKLOADS["gemm"]
    imported = import_shape_sets()
    assert rms.shapes("flashinfer-rmsnorm_h4096") == imported["rmsnorm_h4096"].shapes
    assert gemm.shapes("flashinfer-gemm_n6144_k4096") == imported["gemm_n6144_k4096"].shapes
    # odd shapes and attributes of the own shape set with the same constant axes
    assert rms.validation_shapes["flashinfer-rmsnorm_h4096"] == rms.validation_shapes["llama3-8b"]
    assert rms.attrs_for("flashinfer-rmsnorm_h4096") == rms.attrs_for("llama3-8b")
    assert gemm.validation_shapes["flashinfer-gemm_n4096_k4096"] == gemm.validation_shapes["llama3-8b-o-decode"]
    assert {s["K"] for s in gemm.validation_shapes["flashinfer-gemm_n4096_k4096"]} == {4099}  # real K + 3


def test_without_the_folder_or_with_a_broken_one_the_registry_is_unchanged(tmp_path):
    from kernels.interchange.flashinfer_trace import with_imported_shape_sets
    from kernels.workloads.registry import WORKLOADS as registry

    own = dict(registry)
    (tmp_path / "empty").mkdir()
    assert with_imported_shape_sets(own, tmp_path / "empty") == own  # nothing to import: no error
    (tmp_path / "workloads" / "x").mkdir(parents=True)
    (tmp_path / "workloads" / "x" / "bad.jsonl").write_text("not json\n")
    with pytest.warns(UserWarning, match="FlashInfer Trace shape sets not imported: .*bad.jsonl:1"):
        out = with_imported_shape_sets(own, tmp_path)
    assert out == own


@pytest.mark.parametrize("break_it", ["const-value", "axes-list", "not-utf8", "name-list"])
def test_a_malformed_folder_is_a_warning_and_imports_nothing(tmp_path, break_it):
    from kernels.interchange.flashinfer_trace import with_imported_shape_sets
    from kernels.workloads.registry import WORKLOADS as registry

    for sub in ("definitions/rmsnorm", "workloads/rmsnorm"):
        shutil.copytree(DATA / sub, tmp_path / sub)
    path = tmp_path / "definitions" / "rmsnorm" / "rmsnorm_h4096.json"
    d = json.loads(path.read_text())
    if break_it == "const-value":
        d["axes"]["hidden_size"]["value"] = "big"
    elif break_it == "axes-list":
        d["axes"] = ["batch_size"]
    elif break_it == "name-list":
        d["name"] = ["rmsnorm_h4096"]
    else:
        (tmp_path / "workloads" / "rmsnorm" / "rmsnorm_h4096.jsonl").write_bytes(b"\xff\xfe not utf-8\n")
    path.write_text(json.dumps(d))
    own = dict(registry)
    with pytest.warns(UserWarning, match="FlashInfer Trace shape sets not imported"):
        assert with_imported_shape_sets(own, tmp_path) == own


@pytest.mark.parametrize("axes, message", [
    ({"batch_size": 0}, "not an integer in"),
    ({"batch_size": -3}, "not an integer in"),
    ({"batch_size": True}, "not an integer in"),
    ({"batch_size": 3.9}, "not an integer in"),
    ({"batch_size": "7"}, "not an integer in"),
    ({"batch_size": 2**40}, "not an integer in"),
    ({"batch_size": 7, "hidden_size": 5}, "sets constant axis hidden_size to 5"),
])
def test_an_entry_with_bad_axes_is_refused(axes, message):
    d = load_definitions()["rmsnorm_h4096"]
    with pytest.raises(FlashInferTraceError, match=message):
        entry_shape(d, {"uuid": "u", "axes": axes})
    assert entry_shape(d, {"uuid": "u", "axes": {"batch_size": 7, "hidden_size": 4096}}) == {"rows": 7, "hidden": 4096}


# -- export ----------------------------------------------------------------------------------


def test_export_solution_is_a_flashinfer_solution():
    src = load_template("rmsnorm")
    s = strict_json(export_solution("rmsnorm", src, PARAMS, name="int21-rmsnorm-1", author="evolutionary", target="cpu-x86_64"))
    assert set(s) == SOLUTION_KEYS and set(s["spec"]) == SPEC_KEYS
    assert s["definition"] == "rmsnorm_h4096" and s["spec"]["language"] == "cpp"
    assert s["spec"]["entry_point"] == "kernel.c::rmsnorm" and s["spec"]["target_hardware"] == ["cpu"]
    (source,) = s["sources"]
    assert source["path"] == s["spec"]["entry_point"].split("::")[0]
    assert source["content"].startswith("#define ROWS_PER_CHUNK 4\n") and source["content"].endswith(src)


def test_export_solution_for_cuda_names_the_kernel_and_hardware():
    src = 'extern "C" __global__ void gemm_tiled(const float *A, const float *B, float *C) {}\n'
    s = strict_json(export_solution("gemm", src, {"BM": 64}, name="g1", author="llm", target="cuda-sm90",
                                    definition="gemm_n6144_k4096"))
    assert s["definition"] == "gemm_n6144_k4096" and s["spec"]["language"] == "cuda"
    assert s["spec"]["entry_point"] == "kernel.cu::gemm_tiled"
    assert s["spec"]["target_hardware"] == ["NVIDIA_H100", "NVIDIA_H200"]


@pytest.mark.parametrize("kwargs, words", [
    ({"workload": "gemm"}, "pass definition="),
    ({"workload": "softmax"}, "maps to definitions none"),
    ({"target": "replay:gemm-clblast-xgemm_RTX-3090"}, "replay data has no source"),
    ({"definition": "gemm_n4096_k4096"}, "maps to workload 'gemm'"),
    ({"name": ""}, "non-empty name"),
])
def test_export_solution_refuses_what_it_cannot_map(kwargs, words):
    args = {"workload": "rmsnorm", "target": "cpu-x86_64", "name": "n", "author": "a", **kwargs}
    with pytest.raises(FlashInferTraceError, match=words):
        export_solution(args.pop("workload"), "int x;", PARAMS, **args)


def test_export_trace_of_a_passed_evaluation(rmsnorm_evidence):
    entry = batch_entry(1)
    t = strict_json(export_trace("rmsnorm_h4096", entry, "int21-rmsnorm-1", rmsnorm_evidence))
    assert set(t) == TRACE_KEYS and t["workload"] == entry.raw["workload"]
    ev = t["evaluation"]
    assert set(ev) == {"status", "correctness", "performance", "environment", "timestamp", "log"}
    assert ev["status"] == "PASSED"
    assert ev["performance"]["latency_ms"] == rmsnorm_evidence.metrics["latency_ms[rows=1,hidden=4096]"]
    assert 0 <= ev["correctness"]["max_relative_error"] <= WORKLOADS["rmsnorm"].tolerance
    assert ev["environment"]["hardware"] == rmsnorm_evidence.fingerprint["cpu_model"]
    assert "compiler" in ev["environment"]["libs"] and ev["timestamp"].endswith("Z")


def test_export_trace_needs_timing_of_the_entry_shape(rmsnorm_evidence):
    with pytest.raises(FlashInferTraceError, match="no latency"):
        export_trace("rmsnorm_h4096", batch_entry(7), "s", rmsnorm_evidence)


@pytest.mark.parametrize("outcome", [o for o in Outcome if o is not Outcome.ok])
def test_export_trace_maps_every_failure_to_flashinfer_status(outcome):
    ev = Evidence(status=outcome, metrics={"max_abs_error": 3.0, "max_rel_error": float("nan")}, log="why",
                  fingerprint={"device_name": "NVIDIA H200", "cuda_version": "12.6"})
    t = strict_json(export_trace("rmsnorm_h4096", batch_entry(7).raw["workload"], "s", ev, timestamp="2026-01-01T00:00:00Z"))
    e = t["evaluation"]
    assert e["status"] == STATUS_MAP[outcome] and "performance" not in e
    assert e["environment"] == {"hardware": "NVIDIA H200", "libs": {"cuda": "12.6"}}
    if outcome is Outcome.wrong_result:
        assert e["correctness"] == {"max_relative_error": "NaN", "max_absolute_error": 3.0}
    else:
        assert "correctness" not in e
    # FlashInfer has no status for these two: our outcome is named in the log.
    named = outcome in (Outcome.invalid, Outcome.invalid_input)
    assert e["log"].startswith(f"int21 outcome: {outcome}\n") == named and e["log"].endswith("why")


def test_export_trace_picks_the_entry_shape_from_synthetic_evidence():
    """Same mapping without the sandbox: latency and errors of the entry's own shape."""
    cases = [
        {"kind": "validation", "label": "rows=7,hidden=4096", "max_abs_error": 1e-6, "max_rel_error": 2e-7},
        {"kind": "validation", "label": "rows=1,hidden=4096", "max_abs_error": 5e-6, "max_rel_error": 9e-7},
    ]
    ev = Evidence(status=Outcome.ok, metrics={"latency_ms[rows=7,hidden=4096]": 0.25, "latency_ms[rows=1,hidden=4096]": 0.1},
                  samples_ms={"rows=7,hidden=4096": [0.25], "rows=1,hidden=4096": [0.1]}, cases=cases,
                  fingerprint={"device_name": "NVIDIA H200"})
    e = strict_json(export_trace("rmsnorm_h4096", batch_entry(7), "s", ev, hardware="NVIDIA_H200"))["evaluation"]
    assert e["performance"] == {"latency_ms": 0.25, "reference_latency_ms": 0.0, "speedup_factor": 0.0}
    assert e["correctness"] == {"max_relative_error": 2e-7, "max_absolute_error": 1e-6}
    assert e["environment"]["hardware"] == "NVIDIA_H200"


# -- constraints and index tensors -------------------------------------------------------------


def gemm_folder(tmp_path, **changes):
    """A copy of the gemm_n4096_k4096 definition and workloads with ``changes`` to the
    definition; the other definitions are left out."""
    for sub in ("definitions/gemm", "workloads/gemm"):
        shutil.copytree(DATA / sub, tmp_path / sub)
    path = tmp_path / "definitions" / "gemm" / "gemm_n4096_k4096.json"
    d = json.loads(path.read_text())
    d.update(changes)
    path.write_text(json.dumps(d))
    return tmp_path


def test_constraints_that_parse_are_enforced_on_the_shapes(tmp_path):
    plain = import_shape_sets(gemm_folder(tmp_path / "plain"))["gemm_n4096_k4096"]
    assert any(s["M"] % 2 for s in plain.shapes) and any(s["M"] > 64 for s in plain.shapes)
    folder = gemm_folder(tmp_path / "c", constraints=["M % 2 == 0", "M <= 64"])
    imp = import_shape_sets(folder)["gemm_n4096_k4096"]
    assert imp.shapes and all(s["M"] % 2 == 0 and s["M"] <= 64 for s in imp.shapes)
    assert imp.enforced == ("M % 2 == 0", "M <= 64") and imp.not_enforced == {}
    left_out = {_s["M"] for _s in plain.shapes} - {_s["M"] for _s in imp.shapes}
    assert left_out and {int(label.split(",")[0][2:]) for label in imp.excluded} == left_out
    odd = next(s for s in plain.shapes if s["M"] % 2)
    assert imp.excluded[f"M={odd['M']},N=4096,K=4096"] == "M % 2 == 0"
    assert all(lab not in imp.uuids for lab in imp.excluded)


def test_constraints_in_prose_or_over_tensor_contents_are_kept_and_flagged(tmp_path):
    from kernels.interchange.flashinfer_trace import with_imported_shape_sets
    from kernels.workloads.registry import WORKLOADS as registry

    constraints = ["M must be even", "K == A.shape[1]", "N == 4096"]
    folder = gemm_folder(tmp_path, constraints=constraints)
    imp = import_shape_sets(folder)["gemm_n4096_k4096"]
    assert imp.enforced == ("N == 4096",)
    assert list(imp.not_enforced) == constraints[:2]
    assert all(why.startswith("not enforced: ") for why in imp.not_enforced.values())
    with pytest.warns(UserWarning, match="constraint 'M must be even' not enforced"):
        out = with_imported_shape_sets(dict(registry), folder)
    assert out["gemm"].shapes("flashinfer-gemm_n4096_k4096") == imp.shapes


def test_a_definition_whose_constraints_no_entry_meets_is_refused(tmp_path):
    import dataclasses

    from kernels.interchange.flashinfer_trace import with_imported_shape_sets
    from kernels.workloads.registry import WORKLOADS as registry

    folder = gemm_folder(tmp_path, constraints=["M > 100000"])
    with pytest.raises(FlashInferTraceError, match="every workload entry breaks a constraint"):
        import_shape_sets(folder)
    gemm = registry["gemm"]
    own = {**registry, "gemm": dataclasses.replace(gemm, shape_sets={
        k: v for k, v in gemm.shape_sets.items() if not k.startswith("flashinfer-")})}
    with pytest.warns(UserWarning, match="'gemm_n4096_k4096' not imported: .*M > 100000"):
        out = with_imported_shape_sets(own, folder)
    assert "flashinfer-gemm_n4096_k4096" not in out["gemm"].shape_sets
    assert "flashinfer-gemm_n6144_k4096" in out["gemm"].shape_sets  # the other definition still imports


@pytest.mark.parametrize("descriptor, words", [
    (None, "does not give it"),
    ({"type": "random"}, "gives it as 'random'"),
    ({"type": "safetensors", "path": "./blob/kv.safetensors", "tensor_key": "kv_indptr"}, "blob that is absent"),
])
def test_a_definition_with_index_tensors_that_cannot_be_generated_is_refused(tmp_path, descriptor, words):
    gqa = json.loads((DATA / "definitions/gqa_paged/gqa_paged_decode_h32_kv8_d128_ps1.json").read_text())
    inputs = {**json.loads((DATA / "definitions/gemm/gemm_n4096_k4096.json").read_text())["inputs"],
              "kv_indptr": gqa["inputs"]["kv_indptr"], "kv_indices": gqa["inputs"]["kv_indices"]}
    folder = gemm_folder(tmp_path, inputs=inputs)
    if descriptor is not None:
        wl = folder / "workloads" / "gemm" / "gemm_n4096_k4096.jsonl"
        lines = [json.loads(line) for line in wl.read_text().splitlines() if line.strip()]
        for rec in lines:
            rec["workload"]["inputs"]["kv_indptr"] = descriptor
        wl.write_text("".join(json.dumps(rec) + "\n" for rec in lines))
    with pytest.raises(FlashInferTraceError, match=f"index tensor 'kv_indptr' \\(int32 \\['len_indptr'\\]\\) "
                                                   f"cannot be generated validly: workload entry .* {words}"):
        import_shape_sets(folder)
    from kernels.interchange.flashinfer_trace import import_report

    imported, refused = import_report(folder)
    assert "gemm_n4096_k4096" in refused and "gemm_n6144_k4096" in imported  # the others still import


def test_the_recorded_definitions_parse_their_constraints():
    from kernels.interchange.flashinfer_trace import parse_constraints

    gqa = load_definitions()["gqa_paged_decode_h32_kv8_d128_ps1"]
    enforced, not_enforced = parse_constraints(gqa)
    assert [r.text for r in enforced] == ["len_indptr == batch_size + 1"]
    assert list(not_enforced) == ["num_kv_indices == kv_indptr[-1].item()"]
    assert enforced[0]({"len_indptr": 5, "batch_size": 4}) and not enforced[0]({"len_indptr": 4, "batch_size": 4})
