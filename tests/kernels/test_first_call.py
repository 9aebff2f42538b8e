"""The first call of a candidate is recorded apart from its steady state and flagged when
it carries set-up cost (kernels.evaluation.first_call, the timing loop and both children)."""

import json
import os
import subprocess
import sys
import time

import pytest

from kernels import BenchSettings, Outcome, evaluate, load_template
from kernels.evaluation.first_call import FLAG_MIN_CPU_EXCESS_MS, FLAG_MIN_EXCESS_MS, FLAG_RATIO, first_call_metrics, first_call_note

pytestmark = pytest.mark.timeout(90)

SHAPES = ("rows=1,hidden=256", "rows=8,hidden=256")  # test-small, in timing order

PLAIN = r"""
#include <math.h>
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps)
{
    /*FIRST*/
    for (int r = 0; r < rows; ++r) {
        const float *xr = x + (long)r * hidden;
        float *yr = y + (long)r * hidden;
        double s = 0.0;
        for (int i = 0; i < hidden; ++i) s += (double)xr[i] * xr[i];
        float inv = (float)(1.0 / sqrt(s / hidden + eps));
        for (int i = 0; i < hidden; ++i) yr[i] = xr[i] * inv * w[i];
    }
}
"""

# Builds a "table" on its first call in the process: 5 ms of the calling thread's CPU time
# spinning (its CPU clock: on a loaded host a wall-clock spin would be preempted and do less
# work), then the same correct computation as PLAIN.
SETUP_ON_FIRST_CALL = "#include <time.h>\n" + PLAIN.replace("/*FIRST*/", r"""
    static int ready = 0;
    if (!ready) {
        struct timespec t0, t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        while ((t.tv_sec - t0.tv_sec) * 1e3 + (t.tv_nsec - t0.tv_nsec) / 1e6 < 5.0);
        ready = 1;
    }
""")


def _run(source, params=None):
    bench = BenchSettings(warmup_ms=1.0, rep_ms=2.0, min_reps=3, max_reps=5, flush_bytes=1 << 20)
    return evaluate("rmsnorm", source, params or {}, shape_set="test-small", bench=bench, seed=7, timeout_s=30)


# -- metrics and note ----------------------------------------------------------------------


def test_metrics_per_shape_and_for_the_cold_first_call():
    m = first_call_metrics([("a", 5.0, 0.02), ("b", 0.05, 0.04)])
    assert m["first_call_ms[a]"] == 5.0 and m["first_call_ms[b]"] == 0.05
    assert m["first_call_ratio[a]"] == pytest.approx(250.0) and m["first_call_ratio[b]"] == pytest.approx(1.25)
    assert m["first_call_ms"] == 5.0 and m["first_call_ratio"] == pytest.approx(250.0)  # the first shape's
    assert m["first_call_flag"] == 1.0
    assert first_call_note({**m, "latency_ms[a]": 0.02}) == (
        "first call 250x its steady state: set-up cost on first use (a: 5 ms first, 0.02 ms steady)")


def test_a_later_shape_with_set_up_raises_the_flag_and_the_note_names_it():
    m = first_call_metrics([("a", 0.03, 0.02), ("b", 2.0, 0.01)])
    assert m["first_call_ratio"] == pytest.approx(1.5) and m["first_call_flag"] == 1.0
    assert first_call_note(m).startswith("first call 200x its steady state") and "(b" in first_call_note(m)


@pytest.mark.parametrize("first, steady, flag", [
    (0.2, 0.02, 0.0),  # 10x exactly: not more than 10x
    (0.21, 0.02, 1.0),
    (0.05, 0.001, 0.0),  # 50x, but 49 us above the steady state: cold caches, not set-up
    (FLAG_MIN_EXCESS_MS + 0.0011, 0.001, 1.0),
    (3.0, 1.0, 0.0),  # a large shape's cold first call
])
def test_the_flag_needs_both_the_ratio_and_the_excess(first, steady, flag):
    assert FLAG_RATIO == 10.0
    m = first_call_metrics([("a", first, steady)])
    assert m["first_call_flag"] == flag
    assert bool(first_call_note(m)) == bool(flag)


def test_a_first_call_the_calling_thread_did_not_spend_on_the_cpu_is_not_flagged():
    # 4.6 ms of wall time, 0.05 ms of CPU: the call waited (a preempted OpenMP worker)
    waited = first_call_metrics([("a", 0.03, 0.02, 0.02), ("b", 4.6, 0.1, 0.05)])
    assert waited["first_call_flag"] == 0.0 and waited["first_call_cpu_ms[b]"] == 0.05
    assert first_call_note(waited) == ""
    worked = first_call_metrics([("a", 0.03, 0.02, 0.02), ("b", 4.6, 0.1, 4.5), ("c", 9.0, 0.1, 0.1)])
    assert worked["first_call_flag"] == 1.0
    assert "(b: 4.6 ms first, 0.1 ms steady)" in first_call_note(worked)  # c's ratio is higher, c is not set-up
    assert first_call_metrics([("a", 4.6, 0.1, None)])["first_call_flag"] == 1.0  # no CPU time (CUDA): wall alone


def test_a_cold_first_call_on_a_busy_host_is_not_set_up():
    # 9.3 ms of wall time, 0.3 ms of CPU on a 16 us kernel: a preemption and cold caches
    # refilled under load, not a table
    assert first_call_metrics([("a", 9.28, 0.0155, 0.3)])["first_call_flag"] == 0.0
    assert first_call_metrics([("a", 9.28, 0.0155, FLAG_MIN_CPU_EXCESS_MS + 0.02)])["first_call_flag"] == 1.0


def test_no_first_call_reported_gives_no_first_call_metrics():
    assert first_call_metrics([("a", None, 0.02)]) == {}
    assert first_call_note({}) == "" and first_call_note({"first_call_flag": 0.0}) == ""
    m = first_call_metrics([("a", 0.5, 0.0)])  # no steady median: no ratio, no flag
    assert m == {"first_call_ms[a]": 0.5, "first_call_ms": 0.5, "first_call_flag": 0.0}


# -- timing loop ---------------------------------------------------------------------------


def test_bench_run_reports_the_first_warm_up_call_apart_from_the_samples():
    from kernels.evaluation.timing import bench, bench_run

    calls = []

    def fn():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.02)

    settings = BenchSettings(warmup_ms=0.0, rep_ms=0.0, min_reps=4, max_reps=4, flush="none")
    run = bench_run(fn, settings)
    assert run.first_call_ms >= 20.0 and run.warmup_calls == 3 and len(run.samples_ms) == 4
    assert 0 <= run.first_call_cpu_ms < 10.0  # asleep, not working
    assert max(run.samples_ms) < 10.0  # the first call is in no sample
    assert len(calls) == 7
    assert len(bench(fn, settings)) == 4


def test_the_team_starter_creates_the_openmp_threads_in_a_fresh_process():
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the OpenMP team is the calling thread alone")
    code = ("import os\n"
            "from kernels.evaluation.timing import evict_library, team_starter\n"
            "start = team_starter(evict_library())\n"
            "before = len(os.listdir('/proc/self/task'))\n"
            "start()\n"
            "print(start is not None, before, len(os.listdir('/proc/self/task')))\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE", "PYTHONPATH": root}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, cwd=root)
    assert out.returncode == 0, out.stderr
    found, before, after = out.stdout.split()
    assert found == "True" and int(after) > int(before)
    from kernels.evaluation.timing import team_starter

    assert team_starter(None) is None


# -- evaluations ---------------------------------------------------------------------------


def test_a_kernel_with_set_up_on_its_first_call_is_flagged_and_ranked_by_its_steady_state():
    ev = _run(SETUP_ON_FIRST_CALL)
    assert ev.status == Outcome.ok, ev.log
    m = ev.metrics
    assert m["first_call_ms"] >= 5.0 and m["first_call_ms"] == m[f"first_call_ms[{SHAPES[0]}]"]
    assert m[f"first_call_ms[{SHAPES[1]}]"] < 1.0  # set up once per process, not per shape
    assert m["latency_ms"] < 0.5  # the steady state: the set-up is in no timed sample
    assert all(max(s) < 1.0 for s in ev.samples_ms.values())
    assert m["first_call_ratio"] == pytest.approx(m["first_call_ms"] / m[f"latency_ms[{SHAPES[0]}]"])
    assert m["first_call_ratio"] > 10 and m["first_call_flag"] == 1.0
    assert m[f"first_call_cpu_ms[{SHAPES[0]}]"] >= 4.5  # the spinning was the calling thread's work
    assert "== first call ==\nfirst call " in ev.log and "set-up cost on first use" in ev.log
    json.dumps(ev.to_dict(), allow_nan=False)


@pytest.mark.parametrize("source", ["plain", "template"])
def test_a_kernel_without_set_up_is_not_flagged(source):
    ev = _run(PLAIN.replace("/*FIRST*/", "") if source == "plain" else load_template("rmsnorm"))
    assert ev.status == Outcome.ok, ev.log
    m = ev.metrics
    assert m["first_call_flag"] == 0.0, m
    assert all(m[f"first_call_ms[{s}]"] > 0 and f"first_call_ratio[{s}]" in m for s in SHAPES)
    assert "== first call ==" not in ev.log


def test_the_thread_team_runs_before_the_candidates_first_timed_call():
    """A kernel that leaves its outputs unwritten (a timing-phase call caught by the unwritten
    check) if, at its first call in the timing child (OMP_WAIT_POLICY=PASSIVE there), the
    process has only one thread: the OpenMP team's start-up belongs to the runtime, not to
    the candidate's first call."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("one CPU: the OpenMP team is the calling thread alone")
    source = "#include <dirent.h>\n#include <stdlib.h>\n#include <string.h>\n" + PLAIN.replace("/*FIRST*/", r"""
    static int first = 1;
    if (first) {
        first = 0;
        const char *policy = getenv("OMP_WAIT_POLICY");
        if (policy && !strcmp(policy, "PASSIVE")) {
            int threads = 0;
            DIR *d = opendir("/proc/self/task");
            struct dirent *e;
            while (d && (e = readdir(d))) threads += e->d_name[0] != '.';
            if (d) closedir(d);
            if (threads < 2) return;
        }
    }
    #pragma omp parallel
    { }
""")
    ev = _run(source)
    assert ev.status == Outcome.ok, ev.log
