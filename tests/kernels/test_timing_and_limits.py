"""Cache flush, OpenMP settings, this host's physical limits and the roofline metric."""

import json
import threading

import numpy as np
import pytest

from kernels import Outcome, evaluate, load_template
from kernels.evaluation.timing import OMP_TIMING_DEFAULTS, make_flush, omp_environment
from kernels.hostperf import host_limits, physical_limits


def test_the_flush_rewrites_one_buffer_per_cpu_through_pinned_threads():
    import os

    cpus = sorted(os.sched_getaffinity(0))
    flush = make_flush(1 << 20)
    assert len(flush.bufs) == len(cpus)
    before = [b.copy() for b in flush.bufs]
    flush()
    flush()
    assert all(np.all(b == a + 2) for a, b in zip(before, flush.bufs))  # every word, twice
    if len(cpus) > 1:
        names = {t.name for t in threading.enumerate()}
        assert {f"flush-{c}" for c in cpus} <= names
    assert make_flush(0) is None
    single = make_flush(1 << 16, per_cpu=False)
    single()
    assert len(single.bufs) == 1 and np.all(single.bufs[0] == 1)


def test_timing_sleeps_its_openmp_threads_and_validation_spins_them(monkeypatch):
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_PROC_BIND", "OMP_PLACES"):
        monkeypatch.delenv(f"KERNELS_{name}", raising=False)
    assert omp_environment() == OMP_TIMING_DEFAULTS == {"OMP_WAIT_POLICY": "PASSIVE"}
    assert omp_environment("validation") == {"OMP_WAIT_POLICY": "ACTIVE"}
    monkeypatch.setenv("KERNELS_OMP_WAIT_POLICY", "")
    monkeypatch.setenv("KERNELS_GOMP_SPINCOUNT", "1000")
    assert omp_environment() == {"GOMP_SPINCOUNT": "1000"}
    with pytest.raises(ValueError, match="phase"):
        omp_environment("warmup")


def test_host_limits_are_measured_once_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("KERNELS_CACHE_DIR", str(tmp_path))
    first = host_limits()
    assert first.copy_gbps > 1 and first.fma_gflops > 1 and first.threads >= 1
    files = list(tmp_path.glob("hostperf-*.json"))
    assert len(files) == 1 and json.loads(files[0].read_text())["copy_gbps"] == first.copy_gbps
    assert host_limits() == first  # from the cache: same figures, same time stamp


def test_physical_limits_are_a_margin_over_the_measurement_or_a_fixed_value(monkeypatch):
    monkeypatch.delenv("KERNELS_CPU_PEAK_GBPS", raising=False)
    monkeypatch.setenv("KERNELS_ROOFLINE_MARGIN", "3")
    lim = physical_limits()
    assert lim["gbps"] == pytest.approx(3 * lim["copy_gbps"]) and lim["gflops"] == pytest.approx(3 * lim["fma_gflops"])
    assert lim["source"].startswith("measured")
    monkeypatch.setenv("KERNELS_CPU_PEAK_GBPS", "123")
    assert physical_limits()["gbps"] == 123 and physical_limits()["source"] == "KERNELS_CPU_PEAK_GBPS"
    monkeypatch.setenv("KERNELS_ROOFLINE_MARGIN", "0.5")
    with pytest.raises(ValueError, match=">= 1"):
        physical_limits()


def test_evidence_reports_roofline_and_the_limits_used(quick_bench):
    ev = evaluate("rmsnorm", load_template("rmsnorm"), {}, shape_set="test-small", bench=quick_bench, seed=1)
    assert ev.status == Outcome.ok, ev.log
    lim = ev.fingerprint["limits"]
    assert lim["gbps"] > 0 and lim["copy_gbps"] > 0
    # rmsnorm is memory-bound: % of roofline is achieved GB/s over the copy bandwidth.
    label = "rows=8,hidden=256"
    assert ev.metrics[f"roofline_pct[{label}]"] == pytest.approx(100 * ev.metrics[f"gbps[{label}]"] / lim["copy_gbps"])
    assert 0 < ev.metrics["roofline_pct"] < 100 * lim["gbps"] / lim["copy_gbps"]


def _evictor():
    import platform

    from kernels.evaluation.timing import Evictor, evict_library

    if platform.machine() not in ("x86_64", "aarch64"):
        pytest.skip("no cache-line eviction instruction on this architecture")
    return Evictor(evict_library())


def test_the_evict_flush_clears_lines_without_changing_the_buffers():
    evictor = _evictor()
    assert evictor.method in ("clflushopt", "clflush", "dc civac")
    a = np.arange(100_003, dtype=np.float32)
    b = np.full(17, 3.0, dtype=np.float32)[1:]  # an unaligned start
    before = a.copy(), b.copy()
    plan = evictor.plan([a, b])
    for _ in range(3):
        plan()
    assert np.array_equal(a, before[0]) and np.array_equal(b, before[1])


def test_the_fill_flush_nan_fills_only_the_given_ranges_and_keeps_the_rest():
    evictor = _evictor()
    x = np.arange(50_001, dtype=np.float32)
    buf = np.full(2 * 1024 + 30_001, 7.0, dtype=np.float32)  # [guard | body | guard]
    body = buf[1024:-1024]
    inputs_before = x.copy()
    plan = evictor.plan([x, buf], fill=[body])
    assert plan.fills
    for _ in range(2):
        body[:] = 1.0  # what a call would write
        plan()
        assert np.isnan(body).all()
        assert np.array_equal(body.view(np.uint32), np.full(body.size, 0x7FC00000, np.uint32))  # numpy's NaN
    assert (buf[:1024] == 7.0).all() and (buf[-1024:] == 7.0).all()  # guards untouched
    assert np.array_equal(x, inputs_before)
    # 16-byte stores in the middle, 4-byte ones for an unaligned head and an odd tail
    for start, n in ((1, 1), (1, 2), (3, 7), (1, 4), (2, 13), (0, 3), (5, 1001)):
        buf[:] = 7.0
        part = buf[1024 + start : 1024 + start + n]
        evictor.plan([buf], fill=[part])()
        assert np.isnan(part).all()
        assert (buf[: 1024 + start] == 7.0).all() and (buf[1024 + start + n :] == 7.0).all(), (start, n)
    with pytest.raises(ValueError, match="contiguous, writeable float32"):
        evictor.plan([x], fill=[x.astype(np.float64)])
    frozen = np.frombuffer(bytes(400), dtype=np.float32)  # read-only memory is never written
    with pytest.raises(ValueError, match="writeable"):
        evictor.plan([frozen], fill=[frozen])
    with pytest.raises(ValueError, match="inside one of the evicted arrays"):
        evictor.plan([x], fill=[body])  # would be filled but never evicted


def test_bench_runs_timed_prepare_instead_of_prepare_before_timed_calls():
    from kernels.evaluation.timing import BenchSettings, bench

    log = []
    settings = BenchSettings(warmup_ms=0, rep_ms=0, min_reps=4, max_reps=4, flush="none")
    samples = bench(lambda: log.append("call"), settings, prepare=lambda: log.append("prepare"),
                    flush=lambda: log.append("flush"), timed_prepare=lambda: log.append("timed"))
    assert len(samples) == 4
    warm = ["prepare", "call"] * 3  # at least 3 warm-up calls
    assert log == warm + ["timed", "flush", "call"] * 4


def test_bench_settings_reject_an_unknown_flush():
    from kernels.evaluation.timing import BenchSettings

    with pytest.raises(ValueError, match="flush must be one of evict, rewrite, none"):
        BenchSettings(flush="clflush")


@pytest.mark.parametrize("mode, reported", [("evict", "evict ("), ("rewrite", "rewrite 1048576 bytes"), ("none", "none")])
def test_evidence_records_the_flush_the_timing_child_used(mode, reported, quick_bench):
    import dataclasses
    import platform

    if mode == "evict" and platform.machine() not in ("x86_64", "aarch64"):
        reported = "rewrite 1048576 bytes (evict unavailable"
    bench = dataclasses.replace(quick_bench, flush=mode)
    ev = evaluate("rmsnorm", load_template("rmsnorm"), {"ROWS_PER_CHUNK": 2, "UNROLL": 1, "VEC": 4, "ACC_DOUBLE": 1},
                  shape_set="test-small", bench=bench, seed=3)
    assert ev.status == Outcome.ok, ev.log
    assert ev.fingerprint["flush"].startswith(reported)
    assert ev.fingerprint["bench"]["flush"] == mode


def test_a_missing_eviction_helper_falls_back_to_the_rewrite_flush(monkeypatch, quick_bench):
    from kernels.evaluation import pipeline

    monkeypatch.setattr(pipeline, "_evict_library", lambda be, bench, sections: None)
    ev = evaluate("rmsnorm", load_template("rmsnorm"), {"ROWS_PER_CHUNK": 2, "UNROLL": 1, "VEC": 4, "ACC_DOUBLE": 1},
                  shape_set="test-small", bench=quick_bench, seed=3)
    assert ev.status == Outcome.ok, ev.log
    assert ev.fingerprint["flush"] == "rewrite 1048576 bytes (evict unavailable: helper not compiled)"


@pytest.mark.parametrize("field, value", [
    ("rep_ms", float("nan")), ("warmup_ms", float("inf")), ("rep_ms", -1.0), ("min_reps", 2.5),
    ("max_reps", True), ("flush_bytes", 2**40), ("flush_bytes", 1.0),
])
def test_bench_settings_reject_values_that_would_fail_in_the_child(field, value):
    from kernels.evaluation.timing import BenchSettings

    with pytest.raises(ValueError, match=f"BenchSettings: {field} must be"):
        BenchSettings(**{field: value})
