"""The sandboxed evaluator classifies every kind of candidate correctly."""

import json
import time

import pytest

from kernels import Outcome, evaluate, load_template

pytestmark = pytest.mark.timeout(60)

# A plain, correct RMSNorm; tests break it in one place each.
REFERENCE_C = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    /*BEFORE*/
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden;
        float *yr = y + (long)r * hidden;
        double s = 0.0;
        for (int i = 0; i < /*SUM_END*/hidden; ++i) s += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < /*OUT_END*/hidden; ++i) yr[i] = /*OUT*/xr[i] * inv * w[i];
    }
    /*AFTER*/
}
"""


def kernel(**edits: str) -> str:
    """REFERENCE_C with ``/*NAME*/`` markers replaced, e.g. ``kernel(AFTER="abort();")``."""
    src = REFERENCE_C
    for marker, code in edits.items():
        tag = f"/*{marker}*/"
        assert tag in src, marker
        src = src.replace(tag, code)
    return src


RMSNORM_CORRECT = kernel()


def run(source, quick_bench, params=None, **kw):
    kw.setdefault("timeout_s", 20)
    return evaluate("rmsnorm", source, params or {}, shape_set="test-small", bench=quick_bench, seed=3, **kw)


@pytest.mark.parametrize("params", [
    {"ROWS_PER_CHUNK": 1, "UNROLL": 1, "VEC": 1, "ACC_DOUBLE": 0},
    {"ROWS_PER_CHUNK": 4, "UNROLL": 2, "VEC": 8, "ACC_DOUBLE": 0},
    {"ROWS_PER_CHUNK": 32, "UNROLL": 4, "VEC": 16, "ACC_DOUBLE": 1},
    {"ROWS_PER_CHUNK": 2, "UNROLL": 8, "VEC": 4, "ACC_DOUBLE": 1},
])
def test_the_default_template_is_ok_with_timings(params, quick_bench):
    ev = run(load_template("rmsnorm"), quick_bench, params)
    assert ev.status == Outcome.ok, ev.log
    assert ev.metrics["latency_ms"] > 0
    assert 0 < ev.fingerprint["compile_s"] and set(ev.fingerprint["child_wall_s"]) == {"validation", "timing"}
    assert ev.fingerprint["compile_s"] + sum(ev.fingerprint["child_wall_s"].values()) < ev.duration_s
    assert ev.metrics["latency_ci_low_ms"] <= ev.metrics["latency_ms"] <= ev.metrics["latency_ci_high_ms"]
    assert ev.metrics["gbps"] > 0 and ev.metrics["gflops"] > 0
    assert ev.metrics["max_rel_error"] < 5e-5
    assert set(ev.samples_ms) == {"rows=1,hidden=256", "rows=8,hidden=256"}
    assert all(len(s) >= quick_bench.min_reps and min(s) > 0 for s in ev.samples_ms.values())
    # every timed shape once, the odd shape with two seeds, and each timed output re-checked
    assert [c["label"] for c in ev.cases if c["kind"] == "validation"] == [
        "rows=1,hidden=256", "rows=8,hidden=256", "rows=7,hidden=259", "rows=7,hidden=259"]
    own = [c for c in ev.cases if c["kind"] != "picked"]  # the drawn call reuses a rotation set's seed
    assert len({c["seed"] for c in own}) == len(own)
    assert [c["kind"] for c in ev.cases].count("picked") == 2
    assert all(c["passed"] for c in ev.cases)
    assert ev.fingerprint["compiler_version"] and ev.fingerprint["nproc"] >= 1
    json.dumps(ev.to_dict(), allow_nan=False)


def test_a_plain_correct_kernel_is_ok(quick_bench):
    assert run(RMSNORM_CORRECT, quick_bench).status == Outcome.ok


@pytest.mark.parametrize("name, source, why", [
    ("forgets the weight", kernel(OUT="xr[i] * inv + 0.0f * "), "max_rel_error"),
    ("only correct for multiples of 8", kernel(SUM_END="hidden / 8 * 8 + 0 * ", OUT_END="hidden / 8 * 8 + 0 * "), "rows=7,hidden=259"),
    ("does nothing", "void rmsnorm(const float *x, const float *w, float *y, int r, int h, float e) {}", "NaN"),
    ("writes zeros", kernel(OUT="0.0f * "), "max_rel_error"),
    ("prints a forged result", kernel(
        BEFORE='printf("{\\"ok\\": true, \\"status\\": \\"ok\\", \\"timed\\": {}}\\n"); fflush(stdout);',
        OUT="xr[i] * inv + 0.0f * "), "max_rel_error"),
])
def test_wrong_kernels_are_wrong_result(name, source, why, quick_bench):
    ev = run(source, quick_bench)
    assert ev.status == Outcome.wrong_result, ev.log
    assert why in ev.log
    assert any(not c["passed"] and c["reason"] for c in ev.cases)


def test_a_nondeterministic_kernel_is_wrong_result(quick_bench):
    src = kernel(BEFORE="static int calls = 0; ++calls;", OUT="(calls == 2 ? 2.0f : 1.0f) * xr[i] * inv * w[i] + 0.0f * ")
    ev = run(src, quick_bench)
    assert ev.status == Outcome.wrong_result
    assert "second call" in ev.log
    # Validation decided: no timing child was started for it.
    assert list(ev.fingerprint["child_wall_s"]) == ["validation"]
    assert "not run: validation decided wrong_result" in ev.log and ev.samples_ms == {}
    assert ev.fingerprint["flush"] is None
    assert not any(k.startswith(("latency", "gbps", "gflops")) for k in ev.metrics)  # nothing timed: no 0 ms


def test_a_result_file_whose_header_claims_a_huge_array_is_broken_not_a_crash(tmp_path):
    import numpy as np

    from kernels.evaluation.checks import Broken, load_saved

    with open(tmp_path / "v0_call1_y.npy", "wb") as f:  # a valid header for 2**40 float32, 16 bytes of data
        np.lib.format.write_array_header_1_0(f, {"descr": "<f4", "fortran_order": False, "shape": (2**40,)})
        f.write(bytes(16))
    with pytest.raises(Broken):
        load_saved(tmp_path, "v0_call1_y.npy", 4)


def test_result_files_are_judged_only_as_the_child_reported_them(tmp_path):
    import numpy as np

    from kernels.evaluation.checks import Broken, Tampered, load_saved
    from kernels.hashing import array_digest

    saved = np.arange(4, dtype=np.float32)
    np.save(tmp_path / "a.npy", saved)
    np.save(tmp_path / "planted.npy", saved)
    files = {"a.npy": array_digest(saved), "gone.npy": array_digest(saved)}
    assert np.array_equal(load_saved(tmp_path, "a.npy", 4, digests=files), saved)
    assert load_saved(tmp_path, "planted.npy", 4, missing_ok=True, digests=files) is None  # not the child's
    with pytest.raises(Broken, match="reported no such file"):
        load_saved(tmp_path, "planted.npy", 4, digests=files)
    with pytest.raises(Tampered, match="is gone"):  # saved by the child, then removed
        load_saved(tmp_path, "gone.npy", 4, missing_ok=True, digests=files)
    np.save(tmp_path / "a.npy", saved + 1)
    with pytest.raises(Tampered, match="no longer holds what the child saved"):
        load_saved(tmp_path, "a.npy", 4, digests=files)


def test_a_syntax_error_is_compile_error_with_the_compiler_message(quick_bench):
    ev = run(kernel(AFTER="int oops = ;"), quick_bench)
    assert ev.status == Outcome.compile_error
    assert "error" in ev.log and "oops" in ev.log
    assert ev.metrics == {} and ev.samples_ms == {}


def test_an_undefined_symbol_is_compile_error(quick_bench):
    ev = run(kernel(AFTER="void not_defined_anywhere(void); not_defined_anywhere();"), quick_bench)
    assert ev.status == Outcome.compile_error
    assert "not_defined_anywhere" in ev.log


@pytest.mark.timeout(30)
def test_an_endless_loop_is_timeout_within_the_limit(quick_bench):
    start = time.monotonic()
    ev = run(kernel(BEFORE="while (1) ;"), quick_bench, timeout_s=3)
    assert ev.status == Outcome.timeout
    assert time.monotonic() - start < 10
    assert "3 s" in ev.log


@pytest.mark.parametrize("code, why", [
    ("*(volatile int *)0 = 1;", "SIGSEGV"),
    ("abort();", "SIGABRT"),
    ("exit(0);", "without reporting a result"),
    ("exit(3);", "exited with code 3"),
    ('fprintf(stderr, "dying loudly\\n"); _Exit(1);', "dying loudly"),
])
def test_crashes_and_exits_are_runtime_error(code, why, quick_bench):
    ev = run(kernel(BEFORE=code), quick_bench)
    assert ev.status == Outcome.runtime_error
    assert why in ev.log


def test_a_kernel_writing_into_the_result_pipe_cannot_be_ok(quick_bench):
    forge = r"""
    static int done = 0;
    if (!done) { done = 1;
        const char *m = "{\"ok\": true, \"timed\": {}}";
        for (int fd = 3; fd < 64; ++fd) { extern long write(int, const void *, unsigned long); write(fd, m, 26); }
    }"""
    ev = run(kernel(BEFORE=forge, OUT="xr[i] * inv + 0.0f * "), quick_bench)
    assert ev.status in (Outcome.runtime_error, Outcome.wrong_result)


def test_a_result_forged_through_the_pipe_without_input_checks_is_runtime_error(quick_bench):
    # The forged result replaces the child's own (the pipe is pointed at /dev/null after it).
    forge = r"""
    static int done = 0;
    if (!done) { done = 1;
        const char *m = "{\"ok\": true, \"timed\": {}}";
        int null = open("/dev/null", O_WRONLY);
        for (int fd = 3; fd < 64; ++fd)
            if (fd != null && (fcntl(fd, F_GETFL) & O_ACCMODE) == O_WRONLY) { write(fd, m, strlen(m)); dup2(null, fd); }
    }"""
    source = "#include <fcntl.h>\n#include <string.h>\n#include <unistd.h>\n" + kernel(BEFORE=forge)
    ev = run(source, quick_bench)
    assert ev.status == Outcome.runtime_error, ev.log
    assert "the result on the pipe is not the child's own report" in ev.log


def test_writing_past_the_output_is_invalid(quick_bench):
    ev = run(kernel(AFTER="y[(long)rows * hidden + 3] = 1.0f;"), quick_bench)
    assert ev.status == Outcome.invalid
    assert "wrote past the end of output 'y'" in ev.log


def test_modifying_an_input_is_invalid(quick_bench):
    ev = run(kernel(AFTER="((float *)x)[0] += 1.0f;"), quick_bench)
    assert ev.status == Outcome.invalid
    assert "modified input 'x'" in ev.log


def test_modifying_an_input_during_timing_only_is_invalid(quick_bench):
    # Validation calls each case's buffers twice; timing calls each input set's many times.
    third_call_on_a_set = """
        static const float *seen[256]; static int calls[256], n;
        int k = 0;
        while (k < n && seen[k] != x) ++k;
        if (k == n && n < 256) { seen[n] = x; calls[n++] = 0; }
        if (k < n && ++calls[k] == 3) ((float *)x)[1] += 1.0f;"""
    ev = run(kernel(BEFORE=third_call_on_a_set), quick_bench)
    assert ev.status == Outcome.invalid, ev.log
    assert "during timing: modified input 'x' (1 elements changed)" in ev.log


def test_modifying_an_input_and_its_file_in_the_directory_is_still_invalid(quick_bench):
    # The child's directory holds the input files the parent wrote; the check must not trust them.
    patch_the_file_too = r"""
        static const float *seen[256]; static int calls[256], n;
        int k = 0;
        while (k < n && seen[k] != x) ++k;
        if (k == n && n < 256) { seen[n] = x; calls[n++] = 0; }
        if (k < n && ++calls[k] == 2) {
            long size = (long)rows * hidden * 4;
            float *copy = malloc(size);
            DIR *d = opendir(".");
            struct dirent *e;
            while ((e = readdir(d))) {
                size_t len = strlen(e->d_name);
                if (strncmp(e->d_name, "in_", 3) || len < 6 || strcmp(e->d_name + len - 6, "_x.npy")) continue;
                struct stat st;
                stat(e->d_name, &st);
                int fd = open(e->d_name, O_RDONLY);
                pread(fd, copy, size, st.st_size - size);
                close(fd);
                if (memcmp(copy, x, size)) continue;
                chmod(e->d_name, 0600);
                fd = open(e->d_name, O_RDWR);
                float v = x[0] + 1.0f;
                ((float *)x)[0] = v;
                pwrite(fd, &v, 4, st.st_size - size);
                close(fd);
                break;
            }
            closedir(d);
            free(copy);
        }"""
    source = ("#include <dirent.h>\n#include <fcntl.h>\n#include <string.h>\n#include <sys/stat.h>\n"
              "#include <unistd.h>\n" + kernel(AFTER=patch_the_file_too))
    ev = run(source, quick_bench)
    assert ev.status == Outcome.invalid, ev.log
    assert "modified input 'x' (1 elements changed)" in ev.log


def test_rewriting_a_saved_output_file_is_invalid(quick_bench):
    # From its second call on, the candidate changes the last 4 bytes of the first call's saved
    # output (the file is in its own directory); the child's digest of it no longer matches.
    rewrite = r"""
        static int calls;
        if (++calls > 1) {
            int fd = open("v0_call1_y.npy", O_WRONLY);
            if (fd >= 0) {
                struct stat st;
                float one = 1.0f;
                if (!fstat(fd, &st)) (void)!pwrite(fd, &one, 4, st.st_size - 4);
                close(fd);
            }
        }"""
    ev = run("#include <fcntl.h>\n#include <sys/stat.h>\n#include <unistd.h>\n" + kernel(BEFORE=rewrite),
             quick_bench)
    assert ev.status == Outcome.invalid, ev.log
    assert "v0_call1_y.npy no longer holds what the child saved: rewritten after the call" in ev.log


def test_a_fifo_planted_where_the_child_saves_is_named_not_a_hang(quick_bench):
    # The first call plants FIFOs at the names of the first case's second-call output and of its
    # inputs; opening one for writing would block until the timeout.
    plant = r"""
        static int planted;
        if (!planted++) { mkfifo("v0_call2_y.npy", 0600); mkfifo("v0_after_x.npy", 0600); }"""
    ev = run("#include <sys/stat.h>\n" + kernel(BEFORE=plant), quick_bench, timeout_s=60)
    assert ev.status == Outcome.runtime_error, ev.log
    assert "v0_call2_y.npy exists already" in ev.log and ev.duration_s < 30


def test_the_child_reports_input_digests_and_saves_only_changed_inputs(tmp_path, monkeypatch):
    from kernels.hashing import array_digest
    from kernels.sandbox.child import _Io
    from kernels.workloads import get_workload

    monkeypatch.chdir(tmp_path)
    wl = get_workload("rmsnorm").for_shape_set("test-small")
    shape = wl.shapes("test-small")[0]
    inputs = wl.generate(shape, 1)
    digests = {k: array_digest(v) for k, v in inputs.items()}
    io_ = _Io(wl, shape, inputs, 8)
    assert io_.check_inputs(digests, "a") == {k: [digests[k], 0, 0] for k in ("x", "w")}
    assert not list(tmp_path.iterdir())  # nothing changed: nothing saved
    io_.inputs["x"][8 + 2] += 1.0  # body
    io_.inputs["w"][-1] = 0.0  # the guard after w
    io_.inputs["w"][0] = 0.0  # and the one before it
    report = io_.check_inputs(digests, "b")
    assert report["x"][0] != digests["x"] and report["x"][1:] == [0, 0]
    assert report["w"] == [digests["w"], 1, 1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b_x.npy"]


def test_input_files_are_read_straight_into_guarded_buffers(tmp_path):
    import numpy as np

    from kernels.sandbox.child import GUARD_BITS, _Io, load_guarded
    from kernels.workloads import get_workload

    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.save(tmp_path / "x.npy", x)
    g = load_guarded(str(tmp_path / "x.npy"), 8)
    assert g.shape == (3, 4) and g.buf.dtype == np.float32 and g.buf.size == 12 + 16
    assert np.array_equal(g.buf[8:-8], x.reshape(-1))
    assert (g.buf[:8].view(np.uint32) == GUARD_BITS).all() and (g.buf[-8:].view(np.uint32) == GUARD_BITS).all()
    wl = get_workload("rmsnorm")
    io_ = _Io(wl, {"rows": 3, "hidden": 4}, {"x": g, "w": np.ones(4, np.float32)}, 8)
    assert io_.inputs["x"] is g.buf and io_.rows == {"x": 4, "w": 4}
    np.save(tmp_path / "d.npy", x.astype(np.float64))
    with pytest.raises(ValueError, match="not C-ordered float32"):
        load_guarded(str(tmp_path / "d.npy"), 8)
    np.save(tmp_path / "f.npy", np.asfortranarray(x))
    with pytest.raises(ValueError, match="Fortran order"):
        load_guarded(str(tmp_path / "f.npy"), 8)
    data = (tmp_path / "x.npy").read_bytes()
    (tmp_path / "t.npy").write_bytes(data[:-5])
    with pytest.raises(ValueError, match="ends after"):
        load_guarded(str(tmp_path / "t.npy"), 8)


def test_the_parent_judges_the_reported_input_checks(tmp_path):
    import numpy as np

    from kernels.evaluation.checks import Broken, check_inputs
    from kernels.hashing import array_digest
    from kernels.sandbox.guard_pages import GUARD_ELEMS as G

    inputs = {"x": np.arange(4, dtype=np.float32), "w": np.ones(2, np.float32)}
    digests = {k: array_digest(v) for k, v in inputs.items()}
    ok = {k: [d, 0, 0] for k, d in digests.items()}
    assert check_inputs(inputs, tmp_path, "{inp}.npy", ok, digests) == ""
    changed = {**ok, "x": ["0" * 64, 0, 0]}
    assert check_inputs(inputs, tmp_path, "{inp}.npy", changed, digests) == \
        "modified input 'x' (its digest after the calls differs)"
    saved = np.full(4 + 2 * G, np.float32(0))
    saved[G : G + 4] = [0, 1, 7, 9]
    np.save(tmp_path / "x.npy", saved)  # what the child saves for a changed input
    assert check_inputs(inputs, tmp_path, "{inp}.npy", changed, digests) == "modified input 'x' (2 elements changed)"
    assert check_inputs(inputs, tmp_path, "{inp}.npy", {**ok, "w": [digests["w"], 0, 2]}, digests) == \
        "wrote outside input 'w' (0 guard elements before it, 2 after it changed)"
    for bad in ({"x": ok["x"]}, {**ok, "x": [digests["x"], 0]}, {**ok, "x": [digests["x"], -1, 0]},
                {**ok, "x": [digests["x"], True, 0]}, {**ok, "x": [1, 0, 0]}, {**ok, "x": "0"}):
        with pytest.raises(Broken, match="is missing or malformed"):
            check_inputs(inputs, tmp_path, "{inp}.npy", bad, digests)


def test_faster_than_the_physical_limit_is_invalid(quick_bench, monkeypatch):
    monkeypatch.setenv("KERNELS_CPU_PEAK_GBPS", "1e-9")
    ev = run(RMSNORM_CORRECT, quick_bench)
    assert ev.status == Outcome.invalid
    assert "physical limit" in ev.log
    assert ev.metrics["latency_ms"] > 0  # evidence keeps what was measured


def test_bad_parameters_are_invalid(quick_bench):
    ev = run(RMSNORM_CORRECT, quick_bench, params={"NOT AN IDENT": 1})
    assert ev.status == Outcome.invalid
    assert "C identifier" in ev.log


def test_the_candidate_sees_an_empty_environment(quick_bench, monkeypatch):
    monkeypatch.setenv("INT21_TEST_SECRET", "hunter2")
    src = kernel(BEFORE='if (getenv("INT21_TEST_SECRET") || getenv("HOME")) abort();')
    assert run(src, quick_bench).status == Outcome.ok


def test_seeds_are_fresh_unless_given(quick_bench):
    a = evaluate("rmsnorm", RMSNORM_CORRECT, {}, shape_set="test-small", bench=quick_bench)
    b = evaluate("rmsnorm", RMSNORM_CORRECT, {}, shape_set="test-small", bench=quick_bench)
    assert a.cases[0]["seed"] != b.cases[0]["seed"]
    c = run(RMSNORM_CORRECT, quick_bench)
    assert c.cases[0]["seed"] == run(RMSNORM_CORRECT, quick_bench).cases[0]["seed"]


def test_unknown_names_raise_key_error(quick_bench):
    with pytest.raises(KeyError, match="known: .*rmsnorm"):
        evaluate("nope", RMSNORM_CORRECT, {})
    with pytest.raises(KeyError, match="llama3-8b"):
        evaluate("rmsnorm", RMSNORM_CORRECT, {}, shape_set="nope")


def test_expected_values_kept_ahead_equal_those_computed_on_demand():
    import numpy as np

    from kernels.evaluation.cases import Expected, plan_cases
    from kernels.workloads import get_workload

    wl = get_workload("rmsnorm").for_shape_set("test-small")
    cases, timed = plan_cases(wl, "test-small", 11)
    ahead = Expected(wl, cases, timed).start()
    ahead.join()
    # References ahead: every validation case and every fresh-contents set (the last timed
    # call's reference is the judge's: it depends on the values swapped for that call).
    assert len(ahead.done) == len(cases) + len(timed)
    lazy = Expected(wl, cases, timed, budget_bytes=0).start()
    lazy.join()
    assert lazy.done == {}  # over budget: nothing kept, everything computed when asked
    for c in cases:
        (xa, ra), (xl, rl) = ahead.get(c["shape"], c["seed"]), lazy.get(c["shape"], c["seed"])
        assert all(np.array_equal(xa[k], xl[k]) for k in xa) and all(np.array_equal(ra[k], rl[k]) for k in ra)


def test_inputs_are_generated_once_and_handed_to_the_children_as_files(tmp_path, monkeypatch):
    import numpy as np

    from kernels.evaluation.cases import Expected, plan_cases
    from kernels.sandbox.child import _inputs
    from kernels.workloads import get_workload

    wl = get_workload("rmsnorm").for_shape_set("test-small")
    cases, timed = plan_cases(wl, "test-small", 5)
    dirs = {"validation": tmp_path / "v", "timing": tmp_path / "t"}
    for d in dirs.values():
        d.mkdir()
    exp = Expected(wl, cases, timed, workdirs=dirs).start()
    exp.wait("validation")
    vcases, vtimed = exp.with_files("validation", cases, [])
    assert vtimed == [] and all(set(c["inputs"]) == {"x", "w"} for c in vcases)
    exp.join()
    tcases, ttimed = exp.with_files("timing", [], timed)
    assert tcases == [] and all(len(t["inputs"]) == len(t["seeds"]) and t["fresh_inputs"] for t in ttimed)
    # What a child loads is exactly what (shape, seed) generates, and what the parent keeps.
    monkeypatch.chdir(dirs["validation"])
    for c in vcases:
        loaded, generated = _inputs(wl, c["shape"], c["seed"], c["inputs"]), wl.generate(c["shape"], c["seed"])
        assert all(np.array_equal(loaded[k], generated[k]) for k in generated)
        assert all(np.array_equal(loaded[k], exp.inputs(c["shape"], c["seed"])[k]) for k in generated)
    monkeypatch.chdir(dirs["timing"])
    t = ttimed[0]
    for seed, files in [*zip(t["seeds"], t["inputs"]), (t["fresh_seed"], t["fresh_inputs"])]:
        loaded, generated = _inputs(wl, t["shape"], seed, files), wl.generate(t["shape"], seed)
        assert all(np.array_equal(loaded[k], generated[k]) for k in generated)
    # Without files the child generates; a file of the wrong dtype is refused.
    c = cases[0]
    assert np.array_equal(_inputs(wl, c["shape"], c["seed"], None)["x"], wl.generate(c["shape"], c["seed"])["x"])
    np.save(tmp_path / "bad.npy", np.zeros(4))
    with pytest.raises(ValueError, match="float64, not float32"):
        _inputs(wl, c["shape"], c["seed"], {"x": str(tmp_path / "bad.npy"), "w": str(tmp_path / "bad.npy")})
    with pytest.raises(ValueError, match="inputs are"):
        _inputs(wl, c["shape"], c["seed"], {"x": str(tmp_path / "bad.npy")})


def test_a_failure_to_write_the_input_files_is_an_infrastructure_error(tmp_path):
    from kernels.evaluation.cases import Expected, plan_cases
    from kernels.workloads import get_workload

    wl = get_workload("rmsnorm").for_shape_set("test-small")
    cases, timed = plan_cases(wl, "test-small", 5)
    exp = Expected(wl, cases, timed, workdirs={"validation": tmp_path / "missing"}).start()
    with pytest.raises(OSError):
        exp.wait("validation")
    with pytest.raises(OSError):
        exp.wait("timing")  # every waiter hears of it, none hangs


def test_a_compile_error_stops_the_expected_values_thread():
    import threading

    ev = evaluate("rmsnorm", "this is not C", {"ROWS_PER_CHUNK": 1, "UNROLL": 1, "VEC": 1, "ACC_DOUBLE": 1},
                  shape_set="test-small", seed=1)
    assert ev.status == Outcome.compile_error
    assert not [t for t in threading.enumerate() if t.name == "expected" and t.is_alive()]


def test_the_values_swapped_before_a_timed_call_are_undone_and_replayed_by_the_parent():
    import numpy as np

    from kernels.evaluation.checks import Broken, salted_inputs
    from kernels.sandbox.child import _Io
    from kernels.workloads import get_workload

    wl = get_workload("rmsnorm")
    shape = {"rows": 3, "hidden": 16}
    inputs = wl.generate(shape, 9)
    io_ = _Io(wl, shape, inputs, guard=8)
    before = {k: v.copy() for k, v in io_.inputs.items()}
    rng = np.random.default_rng(0)
    swaps = io_.salt(rng)
    assert set(swaps) == {"x", "w"}
    for name, (i, j) in swaps.items():
        assert i // inputs[name].shape[-1] == j // inputs[name].shape[-1]  # within one row
    seen = {k: v[8:-8].reshape(inputs[k].shape) for k, v in io_.inputs.items()}
    replayed = salted_inputs(inputs, swaps)  # what the parent rebuilds from the report
    assert all(np.array_equal(seen[k], replayed[k]) for k in inputs)
    assert not np.array_equal(seen["x"], inputs["x"]) and np.array_equal(inputs["x"], wl.generate(shape, 9)["x"])
    io_.swap(swaps)
    assert all(np.array_equal(io_.inputs[k], before[k]) for k in before)
    for bad in ({"x": [0, 48]}, {"x": [0]}, {"y": [0, 1]}, {"x": [True, 1]}, ["x"]):
        with pytest.raises(Broken):
            salted_inputs(inputs, bad)
