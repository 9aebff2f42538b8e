"""The paired, interleaved comparison through real sandbox children taking turns.

Kernels here are single-threaded scalar RMSNorm with a tunable amount of extra work (rows
computed again), timed on a shape where a call takes a fraction of a millisecond (the double-precision sum
of squares is a dependent chain, so time follows work; short calls are rarely preempted): the
differences the tests plant are differences of work, not of noise. Forged reports are caught
on a longer shape (about 6 ms a call), whose forged difference a loaded host's noise cannot cover.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernels.comparison import paired
from kernels.comparison.noise_floor import FileFloorStore
from kernels.comparison.paired import ComparisonFailed, Kernel, PairSettings, compare_paired, measure_noise_floor
from kernels.sandbox import spawn, workdirs

ROOT = Path(__file__).resolve().parents[2]
SHAPE = ["rows=32,hidden=4096"]  # llama3-8b: about 0.2 ms a call for the scalar kernel, compute-bound
LONG_SHAPE = ["rows=512,hidden=4096"]  # llama3-8b: about 3 ms a call

SCALAR = r"""
#include <math.h>
#include <stddef.h>
#ifndef EXTRA_PERMILLE
#define EXTRA_PERMILLE 0
#endif
static volatile int extra_permille = EXTRA_PERMILLE;
static void row(const float *x, const float *w, float *y, int hidden, float eps) {
    double ss = 0.0;
    for (int i = 0; i < hidden; i++) ss += (double)x[i] * x[i];
    float inv = (float)(1.0 / sqrt(ss / hidden + eps));
    for (int i = 0; i < hidden; i++) y[i] = x[i] * inv * w[i];
}
void rmsnorm(const float *x, const float *w, float *y, int rows, int hidden, float eps) {
    PRELUDE
    for (int r = 0; r < rows; r++) row(x + (size_t)r * hidden, w, y + (size_t)r * hidden, hidden, eps);
    /* the same rows again: more work, the same result; read at run time, so that every
       amount of extra work compiles to the same machine code */
    int extra = (int)((long)rows * extra_permille / 1000);
    for (int r = 0; r < extra; r++) row(x + (size_t)r * hidden, w, y + (size_t)r * hidden, hidden, eps);
}
"""

QUICK = PairSettings(rounds=6, warmup_calls=2, min_calls=8, max_calls=60, round_ms=40.0)


def kernel(prelude: str = "", includes: str = "", **params) -> Kernel:
    return Kernel(includes + SCALAR.replace("PRELUDE", prelude), params)


@pytest.fixture
def store(tmp_path) -> FileFloorStore:
    return FileFloorStore(tmp_path / "floors.json")


def test_identical_kernels_come_out_tied_every_time(store):
    """A/A: the same kernel, with a #define it never reads differing, is a tie in each of three
    comparisons, against a floor this host measured by A/A first."""
    a, b = kernel(UNUSED=1), kernel(UNUSED=2)
    results = [compare_paired("rmsnorm", a, b, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK, floor_store=store)
               for _ in range(3)]
    assert [r.verdict for r in results] == ["tie"] * 3, [r.why for r in results]
    assert [r.measured_verdict for r in results] == ["tie"] * 3, [r.why for r in results]  # the rounds alone
    assert all(r.identical for r in results)
    assert results[0].floor_source == "measured" and results[1].floor_source == "stored"
    assert results[0].noise_floor == results[2].noise_floor > 0
    assert all(len(r.round_ratios) == QUICK.rounds for r in results)


def test_noise_between_byte_identical_libraries_is_not_refused_as_forgery(store, monkeypatch):
    """On a loaded host the rounds of two identical short kernels can draw a non-tie; the
    verdict is then a tie because the libraries are identical, and the parent's clock check
    (which guards a claim that one side is faster) must not refuse the pair as forged."""
    from kernels.comparison import paired

    real = paired.judge_rounds
    verdicts = iter(["b_faster"])

    def noisy(ratios, floor, **kw):  # the rounds over all shapes draw "b_faster", as noise can
        v = real(ratios, floor, **kw)
        return dataclasses.replace(v, verdict=next(verdicts, v.verdict))

    def refuse(*args):
        raise ComparisonFailed("B", "its reported call times disagree with the parent's clock")

    monkeypatch.setattr(paired, "judge_rounds", noisy)
    monkeypatch.setattr(paired, "_check_clock", refuse)
    r = compare_paired("rmsnorm", kernel(UNUSED=1), kernel(UNUSED=2), shape_set="llama3-8b", shapes=SHAPE,
                       settings=QUICK, noise_floor=0.02, floor_store=store)
    assert r.identical and r.verdict == "tie" and r.measured_verdict == "b_faster", r.why
    with pytest.raises(ComparisonFailed, match="parent's clock"):  # a pair of different bytes is checked
        verdicts = iter(["b_faster"])
        compare_paired("rmsnorm", kernel(), kernel(EXTRA_PERMILLE=10), shape_set="llama3-8b", shapes=SHAPE,
                       settings=QUICK, noise_floor=0.02, floor_store=store)


def test_equivalent_kernels_of_different_bytes_come_out_tied(store):
    """The same work in different machine code (an extra function the entry point never
    calls): the rounds alone must call it a tie."""
    other = Kernel("static float unused(float v) { return v * 3.0f; }\n" + SCALAR.replace("PRELUDE", "")
                   + "float keep_unused(float v) { return unused(v); }\n", {})
    r = compare_paired("rmsnorm", kernel(), other, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                       floor_store=store)
    assert not r.identical
    assert r.verdict == r.measured_verdict == "tie", r.why


def test_a_kernel_doing_half_again_the_work_is_found_slower(store):
    more = dataclasses.replace(QUICK, rounds=10)  # the same protocol (and floor), more rounds
    r = compare_paired("rmsnorm", kernel(), kernel(EXTRA_PERMILLE=500), shape_set="llama3-8b", shapes=SHAPE,
                       settings=more, floor_store=store)
    assert r.verdict == r.measured_verdict == "a_faster", r.why
    # Half again the rows: about 1.5x on a quiet host, but wake-ups of other processes on a busy
    # one shift the point estimate by tens of percent. The interval carries the significance;
    # the estimate is checked for direction and rough size.
    assert r.ci[0] > 1 + r.noise_floor, r.why
    assert 1.1 < r.ratio < 1.7, r.why
    assert not r.identical
    swapped = compare_paired("rmsnorm", kernel(EXTRA_PERMILLE=500), kernel(), shape_set="llama3-8b", shapes=SHAPE,
                             settings=more, floor_store=store)
    assert swapped.verdict == "b_faster", swapped.why


def test_a_five_percent_difference_is_found_or_the_rounds_it_needs_are_given(store):
    r = compare_paired("rmsnorm", kernel(), kernel(EXTRA_PERMILLE=50), shape_set="llama3-8b", shapes=SHAPE,
                       settings=PairSettings(rounds=10, warmup_calls=2, min_calls=10, round_ms=60.0),
                       floor_store=store)
    if r.verdict == "a_faster":  # the interval is above the floor; the estimate, shifted by a busy
        assert 1.0 < r.ratio < 1.09, r.why  # host's wake-ups, is checked for direction and rough size
    else:  # this host cannot resolve it with these rounds: the result says what it would take
        assert r.verdict == "tie", r.why
        assert (r.rounds_needed is not None and r.rounds_needed > r.rounds) or "no number of rounds" in r.why, r.why
    assert r.verdict != "b_faster"


def test_a_side_that_skips_work_fails_the_comparison(store):
    lazy = kernel(prelude="static int calls; if (calls++ > 1) return;")
    with pytest.raises(ComparisonFailed) as err:
        compare_paired("rmsnorm", kernel(), lazy, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                       noise_floor=0.02, floor_store=store)
    assert err.value.side == "B" and "unwritten" in err.value.reason


def test_a_hanging_side_fails_within_its_turn_timeout(store):
    hang = kernel(prelude="static int calls; if (calls++ == 3) for (;;) {}")
    settings = PairSettings(rounds=2, warmup_calls=2, min_calls=4, round_ms=10.0, turn_timeout_s=2.0)
    start = time.monotonic()
    with pytest.raises(ComparisonFailed) as err:
        compare_paired("rmsnorm", hang, kernel(), shape_set="llama3-8b", shapes=SHAPE, settings=settings,
                       noise_floor=0.02, floor_store=store)
    assert err.value.side == "A" and "no acknowledgement" in err.value.reason
    assert time.monotonic() - start < 30


def test_a_crashing_side_is_named_with_its_signal(store):
    crash = kernel(prelude="static int calls; if (calls++ == 2) *(volatile int *)0 = 1;")
    with pytest.raises(ComparisonFailed) as err:
        compare_paired("rmsnorm", kernel(), crash, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                       noise_floor=0.02, floor_store=store)
    assert err.value.side == "B" and "SIGSEGV" in err.value.reason, err.value.reason


# Rewrites every timing sample its child has taken to FORGED_NS, through the interpreter it
# shares the process with: what a candidate written to forge its figures can do.
FORGE = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
static void forge(void) {
    int (*ensure)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Ensure");
    void (*release)(int) = (void (*)(int))dlsym(RTLD_DEFAULT, "PyGILState_Release");
    int (*run)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "PyRun_SimpleString");
    if (!ensure || !release || !run) return;
    int g = ensure();
    run("import sys\nf = sys._getframe()\nwhile f is not None:\n"
        "    s = f.f_locals.get('samples')\n"
        "    if isinstance(s, list) and s and isinstance(s[0], list):\n"
        "        for l in s:\n            for i in range(len(l)): l[i] = " FORGED_NS "\n"
        "    f = f.f_back\n");
    release(g);
}
"""


def test_a_side_that_rewrites_its_reported_times_is_refused(store):
    # Both sides compute the rows twice, about 6 ms a call, in rounds of 16 turns each: the
    # forged claim, a whole call shorter, is then more than twice the clock's resolution even
    # where a loaded host scatters each turn by milliseconds (the check ignores claims within it).
    forger = kernel(prelude="forge();", includes='#define FORGED_NS "1000"\n' + FORGE, EXTRA_PERMILLE=1000)
    settings = dataclasses.replace(QUICK, rounds=8, min_calls=16)
    with pytest.raises(ComparisonFailed) as err:
        compare_paired("rmsnorm", kernel(EXTRA_PERMILLE=1000), forger, shape_set="llama3-8b", shapes=LONG_SHAPE,
                       settings=settings, noise_floor=0.02, floor_store=store)
    assert err.value.side == "B" and "parent's clock" in err.value.reason, err.value.reason


@pytest.mark.parametrize("forged", ["0", "-5", "float('nan')", "10**400"])
def test_a_side_that_reports_impossible_call_times_is_refused(store, forged):
    """A call of 0 ns, a negative or a NaN time, or one beyond any float, is no measurement: the
    side that reports one is refused by name, whichever way its figures would have pointed the
    verdict."""
    forger = kernel(prelude="forge();", includes=f'#define FORGED_NS "{forged}"\n' + FORGE)
    with pytest.raises(ComparisonFailed) as err:
        compare_paired("rmsnorm", kernel(), forger, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                       noise_floor=0.02, floor_store=store)
    assert err.value.side == "B" and "not a positive, finite time" in err.value.reason, err.value.reason


def loaded_rounds(walls_a: list[float], walls_b: list[float], rounds: int = 6) -> list[dict]:
    """Rounds of two shapes whose turns, as the parent timed them, are ``walls_*`` (ms) each."""
    return [{"walls_ms": {"A": [walls_a, walls_a], "B": [walls_b, walls_b]}} for _ in range(rounds)]


def reports(a_ms: float, b_ms: float, rounds: int = 6) -> dict[str, list[list[float]]]:
    """Each round's per-shape medians of the sides' reported calls (ms), two shapes."""
    return {"A": [[a_ms / 2, a_ms / 2]] * rounds, "B": [[b_ms / 2, b_ms / 2]] * rounds}


# Turns as a loaded 2-core host times them (flush, wake-up, call): milliseconds, scattered by
# a millisecond, A's child landing beside another tenant and so half a millisecond slower.
TURNS_A, TURNS_B = [2.0, 4.0, 6.0, 3.0, 5.0], [1.5, 3.5, 5.5, 2.5, 4.5]


def test_a_claim_of_microseconds_within_the_turns_scatter_is_not_refused_as_forgery():
    """A reports calls 0.04 ms shorter than B (a third of B's 0.06 ms) while its turns took
    0.5 ms longer: the parent's clock cannot resolve 0.04 ms among turns scattered by ms, so
    this is not evidence of forgery (a real 9x-the-work pair was refused so on a loaded host)."""
    note = paired._check_clock(loaded_rounds(TURNS_A, TURNS_B), reports(0.02, 0.06), 0.05)
    assert note.startswith("A claims calls 0.04 ms shorter") and "could not check" in note, note
    assert paired._check_clock(loaded_rounds(TURNS_A, TURNS_B), reports(0.05, 0.06), 0.05) is None  # under 2x


def test_rounds_shifted_by_where_their_children_landed_widen_the_clocks_error():
    """Turns tight within each round (0.01 ms apart) but whole rounds shifted by up to 3 ms, as
    a child placed beside another tenant is: A's claim of 0.04 ms shorter calls is within that
    error, so it is noted, not refused, though A's turns were longer in most rounds."""
    tight = [1.0, 1.01, 1.02, 1.01, 1.0]
    shifts = [0.0, 3.0, 1.0, 2.5, -0.5, 1.5]
    rounds = [{"walls_ms": {"A": [[w + s for w in tight]] * 2, "B": [tight] * 2}} for s in shifts]
    note = paired._check_clock(rounds, reports(0.02, 0.06), 0.05)
    assert note is not None and "could not check" in note, note


def test_a_claim_contradicted_in_a_few_heavy_tailed_rounds_is_noted_not_refused():
    """A's calls are 0.044 ms shorter, and its turns were shorter by that much in two of six
    rounds but by a few microseconds in four (a wake-up under load took the difference): the
    median misses a quarter of the claim by many of its standard errors, yet four short rounds
    of six are what a fair coin gives a third of the time, so this is no evidence of forgery
    (a real pair, one thread against 65x its work, gives such rounds under load)."""
    tight = [1.0, 1.001, 1.002, 1.001, 1.0]
    shorter_us = [1.0, 2.0, 3.0, 5.0, 40.0, 45.0]
    rounds = [{"walls_ms": {"A": [[w - d / 2e3 for w in tight]] * 2, "B": [tight] * 2}} for d in shorter_us]
    assert 2 * paired._clock_resolution(rounds) < 0.044  # the claim is within what the clock resolves
    note = paired._check_clock(rounds, reports(0.0007, 0.0451), 0.05)
    assert note.startswith("A claims calls 0.0444 ms shorter") and "could not confirm" in note, note
    assert "in 4 of 6 rounds" in note, note
    # the same claim contradicted in every round is refused
    every = [{"walls_ms": {"A": [[w - 0.0005 for w in tight]] * 2, "B": [tight] * 2}} for _ in shorter_us]
    with pytest.raises(ComparisonFailed) as err:
        paired._check_clock(every, reports(0.0007, 0.0451), 0.05)
    assert err.value.side == "A" and "in 6 of 6 rounds" in err.value.reason, err.value.reason
    # with four rounds a sign test cannot refuse (1/16 > 5%): the note says how many rounds can
    note = paired._check_clock(every[:4], reports(0.0007, 0.0451, rounds=4), 0.05)
    assert "in 4 of 4 rounds" in note and "4 rounds cannot: a sign test needs at least 5 to refuse" in note, note


def test_an_unchecked_claim_says_what_the_clock_saw():
    """B claims calls 0.04 ms shorter (within the clock's error) while its turns took 10 ms
    longer, as a side slowing its turns to cut the turns per round would: the note says so."""
    note = paired._check_clock(loaded_rounds(TURNS_A, [w + 10.0 for w in TURNS_A]), reports(0.06, 0.02), 0.05)
    assert "could not check" in note and "B's turns were 20 ms longer" in note, note


def test_the_clocks_error_combines_shapes_in_quadrature():
    one = paired._clock_resolution([{"walls_ms": {"A": [TURNS_A], "B": [TURNS_A]}}] * 4)
    three = paired._clock_resolution([{"walls_ms": {"A": [TURNS_A] * 3, "B": [TURNS_A] * 3}}] * 4)
    assert one > 0 and three == pytest.approx(one * 3 ** 0.5)


@pytest.mark.parametrize("walls_b", [TURNS_A, [0.5, 10.0, 20.0, 30.0, 40.0]], ids=["same-turns", "scattered-by-B"])
def test_a_claim_of_milliseconds_the_clock_does_not_see_is_refused(walls_b):
    """B claims calls 3 ms shorter; its turns were not shorter. Scattering its own turns (the
    second case) does not lift the check: the clock's resolution is taken from the other side."""
    with pytest.raises(ComparisonFailed) as err:
        paired._check_clock(loaded_rounds(TURNS_A, walls_b), reports(3.0, 0.002), 0.05)
    assert err.value.side == "B" and "parent's clock" in err.value.reason


@pytest.mark.parametrize("prelude, expected", [
    ("y[(size_t)rows * hidden] = 1.0f;", "sentinel elements around output 'y'"),
    ("((float *)x)[0] += 1.0f;", "modified input 'x'"),
])
def test_a_side_that_breaks_its_buffers_fails_without_validation(store, prelude, expected):
    bad = Kernel(SCALAR.replace("PRELUDE", "").replace("    /* the same rows again", f"    {prelude}\n    /* the same rows again"))
    with pytest.raises(ComparisonFailed) as err:
        compare_paired("rmsnorm", kernel(), bad, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                       noise_floor=0.02, floor_store=store)
    assert err.value.side == "B" and expected in err.value.reason, err.value.reason


def test_a_side_whose_calls_stall_now_and_then_gets_a_note(store):
    stall = kernel(prelude="static int calls; if (++calls % 3 == 0) { struct timespec t = {0, 2000000}; "
                           "nanosleep(&t, 0); }", includes="#include <time.h>\n")
    r = compare_paired("rmsnorm", kernel(), stall, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                       noise_floor=0.02, floor_store=store)
    assert any(n.startswith("B's mean call") and "stall" in n for n in r.notes), r.notes
    label = SHAPE[0]
    assert r.shapes[label]["mean_b_ms"] > 1.5 * r.shapes[label]["median_b_ms"]


def test_a_side_cannot_signal_the_other_child(store):
    """Both children run as the same sandbox user: ``kill(-1, 0)`` would find the other one
    (and the worker, when not root). The sandbox refuses signals to other processes, so the
    probe fails and the comparison completes; had it succeeded, the kernel crashes."""
    probe = kernel(prelude="if (kill(-1, 0) == 0 || kill(getppid(), 0) == 0) *(volatile int *)0 = 1;",
                   includes="#include <signal.h>\n#include <unistd.h>\n")
    r = compare_paired("rmsnorm", kernel(), probe, shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                       noise_floor=0.02, floor_store=store)
    assert r.verdict in ("a_faster", "b_faster", "tie")


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_child_is_stopped_between_its_turns(tmp_path):
    """While one side is timed the other's process group is stopped (state T), and each turn
    is one call acknowledged."""
    from kernels.backends import get_backend
    from kernels.evaluation.timing import omp_environment
    from kernels.space import format_defines

    lib = Path(get_backend("cpu").compile(SCALAR.replace("PRELUDE", ""), format_defines({})).path)
    policy = spawn.SandboxPolicy.from_env()
    children = []
    try:
        for _ in range(2):
            wd = workdirs.make_workdir(policy, {}, hand_over_dir=False)
            logdir = workdirs.private_tempdir("log")
            workdirs.place(policy, wd, "candidate.so", lib)
            req = {"backend": "cpu", "workload": "rmsnorm", "shape_set": "test-small", "guard": 1024,
                   "bench": {"flush": "none"}, "evict_library": None, "attrs": {"eps": 1e-5}, "cases": [],
                   "library": str(wd / "candidate.so"),
                   "timed": [{"id": "t0", "shape": {"rows": 8, "hidden": 256}, "seeds": [1, 2], "fresh_seed": 3}]}
            child = spawn.start_child(req, wd, logdir, 60, policy=policy, env=omp_environment("timing"), turns=True)
            workdirs.hand_over(policy, wd, 0o700)
            child.begin()
            children.append((child, wd, logdir))
        (a, _, _), (b, _, _) = children
        a.turn(0, 60)
        b.turn(0, 60)
        pid_a = a.pid if a.pid is not None else a.proc.pid
        time.sleep(0.05)
        assert _state(pid_a) == "T"
        for _ in range(3):
            assert a.turn(0, 10) >= 0 and b.turn(0, 10) >= 0
        runs = [c.end(10) for c, _, _ in children]
        for run in runs:
            result = json.loads(run.result)
            assert run.returncode == 0 and run.authentic and len(result["samples_ns"][0]) == 4, run
        with pytest.raises(RuntimeError):
            a.turn(0, 1)
    finally:
        for child, wd, logdir in children:
            child.cancel()
            workdirs.remove_tree(wd)
            workdirs.remove_tree(logdir)


def test_the_noise_floor_is_measured_by_a_over_a_and_kept(store):
    entry = measure_noise_floor("rmsnorm", kernel(), shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                                floor_store=store, target="cpu-test")
    assert entry["rounds"] >= 12 and len(entry["aa_ratios"]) == entry["rounds"]
    assert 0.005 <= entry["floor"] < 1
    assert store.get(entry["key"])["floor"] == entry["floor"]
    assert entry["key"].startswith("cpu-test@") and entry["key"].endswith(f"/rmsnorm/llama3-8b#{QUICK.protocol}")


def test_a_floor_measured_with_other_settings_is_not_reused(store):
    """A floor from few, short rounds is looser than the defaults': it is kept apart."""
    first = compare_paired("rmsnorm", kernel(), kernel(), shape_set="llama3-8b", shapes=SHAPE, settings=QUICK,
                           floor_store=store)
    other = PairSettings(rounds=4, warmup_calls=2, min_calls=12, max_calls=60, round_ms=50.0)
    second = compare_paired("rmsnorm", kernel(), kernel(), shape_set="llama3-8b", shapes=SHAPE, settings=other,
                            floor_store=store)
    assert first.floor_source == second.floor_source == "measured"


# -- command line ------------------------------------------------------------------------------


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernels", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600, env={**os.environ, **(env or {})})


def test_cli_compare_prints_the_verdict_as_json(tmp_path):
    a = tmp_path / "a.c"
    a.write_text(SCALAR.replace("PRELUDE", ""))
    p = _cli("compare", "--workload", "rmsnorm", "--shape", "test-small", "--a", str(a), "--b", str(a),
             "--params-b", '{"UNUSED": 3}', "--quick", "--noise-floor", "0.05", "--json")
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["verdict"] == "tie" and out["identical"] and out["a_status"] == out["b_status"] == "ok"
    assert out["noise_floor"] == 0.05 and out["floor_source"] == "given"
    assert len(out["ci"]) == 2 and out["rounds"] == 4 and out["ratio"] > 0


def test_cli_compare_refuses_a_wrong_kernel_and_bad_usage(tmp_path):
    a = tmp_path / "a.c"
    a.write_text(SCALAR.replace("PRELUDE", ""))
    wrong = tmp_path / "wrong.c"
    wrong.write_text(SCALAR.replace("PRELUDE", "") .replace("y[i] = x[i] * inv * w[i]", "y[i] = x[i] * w[i]"))
    p = _cli("compare", "--workload", "rmsnorm", "--shape", "test-small", "--a", str(a), "--b", str(wrong),
             "--quick", "--noise-floor", "0.05", "--json")
    assert p.returncode == 1
    out = json.loads(p.stdout)
    assert out["b_status"] == "wrong_result" and "B (wrong.c) is wrong_result" in out["error"] and "verdict" not in out
    for args, message in (
        (["--params-a", "[1]"], "--params-a must be a JSON object"),
        (["--rounds", "1"], "--rounds must be an integer"),
        (["--noise-floor", "-1"], "--noise-floor must be a fraction"),
        (["--shape", "nope"], "has no shape set 'nope'"),
    ):
        p = _cli("compare", "--workload", "rmsnorm", "--a", str(a), "--b", str(a), *args)
        assert p.returncode == 2 and message in p.stderr, (args, p.stderr)
    p = _cli("compare", "--workload", "rmsnorm", "--a", str(tmp_path / "missing.c"), "--b", str(a))
    assert p.returncode == 2 and "cannot read" in p.stderr


@pytest.mark.parametrize("seed", [-1, True, 1.5])
def test_pair_settings_refuse_a_seed_numpy_cannot_take(seed):
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        PairSettings(seed=seed)
