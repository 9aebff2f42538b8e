import subprocess
import sys

import numpy as np
import pytest

from kernels import candidate_hash, summarize
from kernels.evaluation.timing import BenchSettings, bench


def test_summarize_gives_median_iqr_and_a_seeded_ci():
    samples = list(np.random.default_rng(0).normal(10, 1, 200))
    s = summarize(samples)
    assert s["n"] == 200
    assert s["median"] == pytest.approx(np.median(samples))
    assert s["ci_low"] < s["median"] < s["ci_high"] and s["ci_high"] - s["ci_low"] < 1
    assert s["iqr"] == pytest.approx(np.subtract(*np.percentile(samples, [75, 25])))
    assert summarize(samples) == s
    with pytest.raises(ValueError):
        summarize([])


def test_bench_returns_reps_within_bounds_and_calls_hooks():
    calls = {"fn": 0, "prepare": 0, "flush": 0}
    settings = BenchSettings(warmup_ms=0, rep_ms=0, min_reps=4, max_reps=6)
    samples = bench(lambda: calls.__setitem__("fn", calls["fn"] + 1), settings,
                    prepare=lambda: calls.__setitem__("prepare", calls["prepare"] + 1),
                    flush=lambda: calls.__setitem__("flush", calls["flush"] + 1))
    assert len(samples) == 4 and all(s >= 0 for s in samples)
    assert calls["flush"] == 4 and calls["prepare"] == calls["fn"] == 4 + 3  # 3 warm-up calls
    with pytest.raises(ValueError):
        BenchSettings(min_reps=5, max_reps=2)


def test_candidate_hash_is_canonical():
    fp = {"compiler": "cc", "flags": ["-O3"]}
    a = candidate_hash("src", {"A": 1, "B": 2}, fp)
    assert a == candidate_hash("src", {"B": 2, "A": 1}, fp)
    assert a != candidate_hash("src", {"A": 1, "B": 3}, fp)
    assert a != candidate_hash("src", {"A": 1, "B": 2}, {**fp, "flags": ["-O2"]})
    assert len(a) == 64


def test_the_library_never_imports_django():
    code = "import sys, kernels, kernels.evaluation.pipeline, kernels.baselines; print('django' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
