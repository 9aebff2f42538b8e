"""`python -m kernels`: workloads, evaluate, tune (run as a subprocess, like a user would)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels import load_template

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]


def cli(*args, check=True):
    proc = subprocess.run([sys.executable, "-m", "kernels", *args], capture_output=True, text=True,
                          cwd=ROOT, env=os.environ.copy(), timeout=170)
    if check and proc.returncode not in (0, 1):
        raise AssertionError(f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def test_workloads_lists_every_workload_with_its_shape_sets():
    data = json.loads(cli("workloads", "--json").stdout)
    by_name = {w["name"]: w for w in data}
    assert by_name["rmsnorm"]["shape_sets"]["test-small"] == [{"rows": 1, "hidden": 256}, {"rows": 8, "hidden": 256}]
    assert by_name["rmsnorm"]["validation_shapes"]["test-small"] == [{"rows": 7, "hidden": 259}]
    table = cli("workloads").stdout
    assert "rmsnorm" in table and "llama3-8b" in table
    narrow = subprocess.run([sys.executable, "-m", "kernels", "workloads"], capture_output=True, text=True, cwd=ROOT,
                            env={**os.environ, "COLUMNS": "80"}, timeout=170).stdout
    assert "…" not in narrow  # a long name folds onto the next line rather than being cut short


def test_evaluate_prints_one_json_object_with_the_evidence(tmp_path):
    src = tmp_path / "k.c"
    src.write_text(load_template("rmsnorm"))
    proc = cli("evaluate", "--workload", "rmsnorm", "--backend", "cpu", "--source", str(src),
               "--params", '{"UNROLL": 4, "VEC": 8}', "--shape", "test-small", "--quick", "--seed", "7", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["status"] == "ok"
    assert {c["kind"] for c in out["cases"]} == {"validation", "timed", "fresh", "picked"}
    assert all(c["max_abs_error"] is not None and c["max_rel_error"] < 5e-5 for c in out["cases"])
    t = out["timing"]["rows=8,hidden=256"]
    assert t["samples"] >= 5 and t["ci_low_ms"] <= t["median_ms"] <= t["ci_high_ms"] and t["iqr_ms"] >= 0
    assert t["first_call_ms"] > 0 and out["metrics"]["first_call_flag"] == 0.0
    m = out["metrics"]
    assert m["gflops"] > 0 and m["gbps"] > 0 and 0 < m["roofline_pct"]
    assert out["static_resources"] == {}
    assert out["fingerprint"]["sandbox"]["network"] in ("namespace", "user-namespace", "shared")
    assert out["fingerprint"]["seed"] == 7


def test_evaluate_exits_1_with_the_status_of_a_broken_candidate(tmp_path):
    src = tmp_path / "bad.c"
    src.write_text("void rmsnorm(const float *x, const float *w, float *y, int r, int h, float e) { oops }")
    proc = cli("evaluate", "--workload", "rmsnorm", "--source", str(src), "--shape", "test-small", "--quick",
               "--json", "--full")
    assert proc.returncode == 1
    out = json.loads(proc.stdout)
    assert out["status"] == "compile_error"
    assert "oops" in out["log"] and out["timing"] == {}


@pytest.mark.parametrize("args, message", [
    (["--workload", "nope"], "unknown workload 'nope'"),
    (["--workload", "rmsnorm", "--shape", "nope"], "no shape set 'nope'"),
    (["--workload", "rmsnorm", "--params", "[1]"], "--params must be a JSON object"),
    (["--workload", "rmsnorm", "--params", "{bad"], "--params is not JSON"),
    (["--workload", "rmsnorm", "--source", "/nonexistent.c"], "cannot read --source"),
    (["--workload", "rmsnorm", "--backend", "tpu", "--shape", "test-small", "--quick"], "unknown backend 'tpu'"),
    (["--workload", "rmsnorm", "--params", '{"UNROL": 4}'], "template has no parameter UNROL"),  # a typo
    (["--workload", "rmsnorm", "--source", str(Path(sys.executable).resolve())], "is not UTF-8 text"),
])
def test_usage_errors_exit_2_with_a_message(args, message):
    proc = cli("evaluate", *args, "--json", check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert message in proc.stderr


def test_a_template_value_outside_its_space_is_evaluated_with_a_warning():
    proc = cli("evaluate", "--workload", "rmsnorm", "--params", '{"UNROLL": 3}', "--shape", "test-small",
               "--quick", "--seed", "1", "--json")
    assert proc.returncode == 0, proc.stderr
    assert "UNROLL=3 outside the template's design space" in proc.stderr
    assert json.loads(proc.stdout)["status"] == "ok"


def test_tune_searches_the_space_of_the_backend_it_is_given():
    cu = ROOT / "kernels" / "workloads" / "rmsnorm" / "template.cu"  # any source: the space is looked up first
    proc = cli("tune", "--workload", "layernorm", "--backend", "cuda", "--budget", "1", "--shape", "test-small",
               "--source", str(cu), check=False)
    assert proc.returncode == 2 and "no CUDA design space for 'layernorm'" in proc.stderr, proc.stderr


def test_tune_runs_a_seeded_random_search_and_prints_the_best():
    proc = cli("tune", "--workload", "rmsnorm", "--backend", "cpu", "--budget", "3", "--shape", "test-small",
               "--seed", "4", "--quick", "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["evaluated"] == 3 and out["status_counts"] == {"ok": 3}
    best = out["best"]
    assert best["status"] == "ok"
    assert best["metrics"]["latency_ms"] == min(c["latency_ms"] for c in out["candidates"])
    assert len({json.dumps(c["params"], sort_keys=True) for c in out["candidates"]}) == 3
    again = json.loads(cli("tune", "--workload", "rmsnorm", "--budget", "3", "--shape", "test-small",
                           "--seed", "4", "--quick", "--json").stdout)
    assert [c["params"] for c in again["candidates"]] == [c["params"] for c in out["candidates"]]
    assert "tune" in proc.stderr  # the progress bar goes to stderr, stdout stays JSON


def test_evaluate_on_a_flashinfer_shape_set_writes_the_solution_and_one_trace_per_entry(tmp_path):
    import shutil

    from kernels import config

    data = config.flashinfer_trace_dir()
    if data is None:
        pytest.skip("shared/datasets/flashinfer-trace not found")
    # A FlashInfer Trace folder with the real definition and its two smallest batches, so
    # that the run takes seconds.
    fi = tmp_path / "fi"
    shutil.copytree(data / "definitions" / "rmsnorm", fi / "definitions" / "rmsnorm")
    lines = (data / "workloads" / "rmsnorm" / "rmsnorm_h4096.jsonl").read_text().splitlines()
    small = [ln for ln in lines if json.loads(ln)["workload"]["axes"]["batch_size"] in (1, 7)]
    (fi / "workloads" / "rmsnorm").mkdir(parents=True)
    (fi / "workloads" / "rmsnorm" / "rmsnorm_h4096.jsonl").write_text("\n".join(small) + "\n")
    env = {**os.environ, "KERNELS_FLASHINFER_TRACE_DIR": str(fi)}
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "kernels", "evaluate", "--workload", "rmsnorm", "--shape",
                           "flashinfer-rmsnorm_h4096", "--quick", "--seed", "3", "--flashinfer-out", str(out), "--json"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=170)
    assert proc.returncode == 0, proc.stderr
    assert set(json.loads(proc.stdout)["timing"]) == {"rows=1,hidden=4096", "rows=7,hidden=4096"}
    solution = json.loads((out / "solution.json").read_text())
    assert solution["definition"] == "rmsnorm_h4096" and solution["spec"]["entry_point"] == "kernel.c::rmsnorm"
    traces = [json.loads(ln) for ln in (out / "traces.jsonl").read_text().splitlines()]
    assert sorted(t["workload"]["axes"]["batch_size"] for t in traces) == [1, 7]
    for t in traces:
        assert t["solution"] == solution["name"] and t["evaluation"]["status"] == "PASSED"
        assert t["evaluation"]["performance"]["latency_ms"] > 0


def test_flashinfer_out_needs_a_flashinfer_shape_set(tmp_path):
    proc = cli("evaluate", "--workload", "rmsnorm", "--shape", "test-small", "--flashinfer-out", str(tmp_path),
               check=False)
    assert proc.returncode == 2 and "needs --shape flashinfer-<definition>" in proc.stderr


def test_an_unusable_flashinfer_out_is_refused_before_the_evaluation(tmp_path):
    from kernels import config

    if config.flashinfer_trace_dir() is None:
        pytest.skip("no FlashInfer Trace data set")
    taken = tmp_path / "a-file"
    taken.write_text("")
    proc = cli("evaluate", "--workload", "rmsnorm", "--shape", "flashinfer-rmsnorm_h4096",
               "--flashinfer-out", str(taken), check=False)
    assert proc.returncode == 2 and "--flashinfer-out: cannot make directory" in proc.stderr
    assert "status" not in proc.stdout  # refused up front: nothing was evaluated


@pytest.mark.parametrize("params, warning", [
    ('{"UNROLL": 4.0}', "UNROLL=4.0 outside the template's design space"),  # not the integer 4
    ('{"UNROLL": 8, "VEC": 16}', "breaks the template's restrictions: UNROLL * VEC <= 64"),
])
def test_a_template_point_of_another_type_or_against_its_restrictions_gets_a_warning(params, warning):
    proc = cli("evaluate", "--workload", "rmsnorm", "--params", params, "--shape", "test-small", "--quick", "--json")
    assert warning in proc.stderr


# -- compare and noise-floor: bad input is refused before anything is measured or stored ------


def _pair_cli(*args, cache):
    env = {**os.environ, "KERNELS_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "kernels", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=170)


@pytest.mark.parametrize("command, args, message", [
    ("noise-floor", ["--seed", "-1"], "--seed must be a non-negative integer, got -1"),
    ("compare", ["--seed", "-5"], "--seed must be a non-negative integer, got -5"),
    ("compare", ["--params-a", '{"VEC": 3}'], "--params-a: VEC=3 outside the template's design space"),
    ("compare", ["--params-b", '{"NOPE": 3}'], "--params-b: the rmsnorm cpu template has no parameter NOPE"),
    ("compare", ["--params-a", '{"VEC": true}'], "--params-a: parameter 'VEC': value True must be an int"),
    ("noise-floor", ["--params", '{"VEC": 3}'], "--params: VEC=3 outside the template's design space"),
    ("noise-floor", ["--params", '{"NOPE": 3}'], "--params: the rmsnorm cpu template has no parameter NOPE"),
    ("noise-floor", ["--params", '{"VEC": true}'], "--params: parameter 'VEC': value True must be an int"),
    ("compare", ["--target", "bogus"], "--target: unknown target 'bogus'"),
    ("noise-floor", ["--target", ""], "--target: unknown target ''"),
    ("noise-floor", ["--target", "replay:some-data"], "the replay backend does not run paired comparisons"),
    ("compare", ["--target", "cuda-sm90"], "the cuda backend does not run paired comparisons"),
    ("noise-floor", ["--target", "cpu-not-this-machine"], "this host serves only its own cpu target"),
])
def test_paired_commands_refuse_bad_input_with_a_usage_error(tmp_path, command, args, message):
    a = tmp_path / "a.c"
    a.write_text(load_template("rmsnorm"))  # the template's text: its design space applies
    sources = ["--a", str(a), "--b", str(a), "--noise-floor", "0.05"] if command == "compare" else []
    cache = tmp_path / "cache"
    proc = _pair_cli(command, "--workload", "rmsnorm", "--shape", "test-small", "--quick", *sources, *args,
                     cache=cache)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.strip().splitlines() == [f"error: {proc.stderr.strip()[len('error: '):]}"]  # one line
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not list(cache.glob("*floor*"))  # nothing stored


def test_a_users_own_source_may_define_other_parameters_but_not_bools(tmp_path):
    src = tmp_path / "k.c"
    src.write_text("#ifndef WIDTH\n#define WIDTH 2\n#endif\n" + load_template("rmsnorm"))
    proc = _pair_cli("noise-floor", "--workload", "rmsnorm", "--shape", "test-small", "--source", str(src),
                     "--params", '{"WIDTH": true}', "--quick", cache=tmp_path / "cache")
    assert proc.returncode == 2 and "--params: parameter 'WIDTH': value True must be an int" in proc.stderr
    proc = _pair_cli("compare", "--workload", "rmsnorm", "--shape", "test-small", "--a", str(src), "--b", str(src),
                     "--params-a", '{"WIDTH": 3}', "--params-b", '{"VEC": 3}', "--quick", "--noise-floor", "0.05",
                     "--seed", "2", "--json", cache=tmp_path / "cache")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["a_status"] == "ok"


@pytest.mark.parametrize("no_validate", [False, True])
def test_compare_of_a_source_without_the_entry_point_says_so_in_one_line(tmp_path, no_validate):
    empty = tmp_path / "empty.c"
    empty.write_text("")
    a = tmp_path / "a.c"
    a.write_text(load_template("rmsnorm"))
    proc = _pair_cli("compare", "--workload", "rmsnorm", "--shape", "test-small", "--a", str(empty), "--b", str(a),
                     "--quick", "--noise-floor", "0.05", *(["--no-validate"] if no_validate else []),
                     cache=tmp_path / "cache")
    assert proc.returncode == 1
    out = (proc.stdout + proc.stderr).strip()
    assert "Traceback" not in out and len(out.splitlines()) == 1, out
    assert "the source defines no function rmsnorm" in out
    assert ("A:" if no_validate else "A (empty.c) is runtime_error") in out
