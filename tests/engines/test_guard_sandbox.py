"""The promotion guard's engine check runs the candidate only in sandbox children confined as
the evaluator's (user, namespaces, Landlock, seccomp, limits, empty environment), and judges
its speed per operator at the engine's shapes by paired, interleaved rounds."""

import secrets
from pathlib import Path

import pytest

from engines._isolated import GuardSettings, check_engine_isolated
from kernels import load_template
from swarm.engine_registry.guard import judge
from tests.kernels.test_hostile_cpu import HEAD, NEEDS_THE_NETWORK, RMS_ROW, SIG, WRITES_OUTSIDE, _Listener

pytestmark = pytest.mark.timeout(600)

PROJECT = Path(__file__).resolve().parents[2]
QUICK = GuardSettings(rounds=3, min_calls=3, round_ms=10.0, noise_floor=0.2)


def request(source, workload="rmsnorm", params=None):
    return {"engine": "llama-layer", "config": "small", "plan": {}, "target": "cpu-x86_64", "production": [],
            "candidate": {"workload": workload, "source": source, "params": params or {}, "candidate": 9, "hash": "h",
                          "shape_set": "test-small"}}


def confined(res):
    sb = res["sandbox"]
    assert sb["network"] in ("namespace", "user-namespace")
    assert sb["filesystem"] in ("landlock", "mount-namespace")
    assert "socket" in sb["seccomp"] and "fork" in sb["seccomp"]
    assert sb["user"]["uid"] != 0


def test_a_candidate_under_the_guard_cannot_write_outside_its_directory():
    token = secrets.randbelow(10**9)
    files = [Path(f"/tmp/pwned-{token}"), PROJECT / f"pwned-{token}"]
    source = f'#define PROJECT_DIR "{PROJECT}"\n' + WRITES_OUTSIDE
    try:
        res = check_engine_isolated(request(source, params={"TOKEN": token}), settings=QUICK)
        assert not any(f.exists() for f in files)
        confined(res)
        assert judge(res)[0] == "wrong_result"  # correct only where the writes succeed
        assert res["timing"] is None
    finally:
        for f in files:
            f.unlink(missing_ok=True)


def test_a_candidate_under_the_guard_cannot_reach_the_network():
    listener = _Listener()
    try:
        res = check_engine_isolated(request(NEEDS_THE_NETWORK, params={"PORT": listener.port}), settings=QUICK)
        assert listener.accepted == 0
        confined(res)
        assert judge(res)[0] == "wrong_result"
    finally:
        listener.close()


# Correct only in an empty environment: any variable but PATH and the OpenMP/BLAS settings
# the sandbox sets garbles the output.
READS_THE_ENVIRONMENT = HEAD + RMS_ROW + r"""
extern char **environ;
""" + SIG + r"""
{
    rms_rows(x, w, y, rows, hidden, eps);
    for (char **e = environ; *e; ++e)
        if (strncmp(*e, "PATH=", 5) && strncmp(*e, "OMP_", 4) && strncmp(*e, "GOMP_", 5) && strncmp(*e, "OPENBLAS_", 9))
            y[0] += 1.0f;
}
"""

# Correct, and does its work 300 times over.
SLOW = HEAD + RMS_ROW + SIG + "\n{\n    for (int i = 0; i < 300; ++i) rms_rows(x, w, y, rows, hidden, eps);\n}\n"


def test_a_candidate_under_the_guard_sees_an_empty_environment(monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://secret@db/prod")
    res = check_engine_isolated(request(READS_THE_ENVIRONMENT), settings=QUICK)
    assert res["challenger_validation"]["status"] == "ok", res["challenger_validation"].get("worst_operator")
    confined(res)


def test_a_kernel_slower_at_the_engine_shapes_is_caught_per_operator():
    # 8 rounds, not 3: at rows=1 a call is microseconds, and one preempted round of 3 on a busy
    # 2-core host spreads the CI of a 3x ratio below 1 (a tie)
    res = check_engine_isolated(request(SLOW), settings=GuardSettings(rounds=8, min_calls=3, round_ms=10.0,
                                                                       noise_floor=0.2))
    assert res["challenger_validation"]["status"] == "ok"
    items = res["timing"]["items"]
    ops = {k: v for k, v in items.items() if v["kind"] == "operator"}
    assert set(ops) == {"rmsnorm rows=24,hidden=256", "rmsnorm rows=1,hidden=256"}
    assert all(v["verdict"] == "a_faster" for v in ops.values()), ops
    assert ops["rmsnorm rows=24,hidden=256"]["ratio"] > 5  # against the NumPy baseline the engine runs today
    verdict, why, _ = judge(res)
    assert verdict == "slower" and "rmsnorm rows=24,hidden=256" in why
    assert res["shapes"] == [{"hidden": 256}]


# Correct, 300 times over on a cache miss; on a hit (a hash of x, w and rows among the last
# 32 calls) it copies the stored output: fast only where calls repeat their inputs.
CACHES_BY_CONTENT = HEAD + RMS_ROW + r"""
static unsigned long long fnv(const void *p, long n, unsigned long long h)
{
    const unsigned char *b = p;
    for (long i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ULL;
    return h;
}
""" + SIG + r"""
{
    static unsigned long long keys[32]; static float *vals[32]; static long sizes[32]; static int used = 0, next = 0;
    long n = (long)rows * hidden;
    unsigned long long h = fnv(x, n * sizeof(float), 1469598103934665603ULL);
    h = fnv(w, hidden * sizeof(float), h);
    h = fnv(&rows, sizeof rows, h);
    for (int i = 0; i < used; ++i)
        if (keys[i] == h && sizes[i] == n) { memcpy(y, vals[i], n * sizeof(float)); return; }
    for (int i = 0; i < 300; ++i) rms_rows(x, w, y, rows, hidden, eps);
    int slot = used < 32 ? used++ : next++ % 32;
    free(vals[slot]); vals[slot] = malloc(n * sizeof(float));
    memcpy(vals[slot], y, n * sizeof(float)); keys[slot] = h; sizes[slot] = n;
}
"""


def test_a_kernel_fast_only_on_repeated_inputs_is_caught():
    res = check_engine_isolated(request(CACHES_BY_CONTENT), settings=QUICK)
    assert res["challenger_validation"]["status"] == "ok", res["challenger_validation"].get("worst_operator")
    items = res["timing"]["items"]
    ops = {k: v for k, v in items.items() if v["kind"] == "operator"}
    assert ops and all(v["verdict"] == "a_faster" for v in ops.values()), ops
    assert ops["rmsnorm rows=24,hidden=256"]["ratio"] > 5
    verdict, why, _ = judge(res)
    assert verdict == "slower", why


def test_identical_code_ties():
    src = load_template("rmsnorm")
    res = check_engine_isolated({**request(src), "production": [
        {"workload": "rmsnorm", "target": "cpu-x86_64", "shape_set": "test-small", "source": src, "params": {},
         "candidate": 1}]}, settings=GuardSettings(rounds=4, min_calls=5, round_ms=10.0, noise_floor=0.5))
    assert "production" in res["incumbent_validation"]["kernels"]["rmsnorm"]
    assert all(v["verdict"] == "tie" for v in res["timing"]["items"].values()), res["timing"]["items"]
    assert judge(res)[0] == "ok"
