from swarm.web import display


def test_numbers_keep_a_few_significant_digits():
    assert display.number(98.27483050000001) == "98.27"
    assert display.number(0.12834) == "0.1283"
    assert display.number(12345.6) == "12346"
    assert display.number(2.5e-7) == "2.500e-07"
    assert display.number(3) == "3" and display.number(0.0) == "0"


def test_values_carry_the_unit_their_key_names():
    assert display.with_unit("latency_ms", 98.27483050000001) == "98.27 ms"
    assert display.with_unit("latency_ms[rows=8]", 0.5) == "0.5 ms"
    assert display.with_unit("gbps", 41.234) == "41.23 GB/s"
    assert display.with_unit("flush_bytes", 64 * 2**20) == "64 MiB"
    assert display.with_unit("max_rel_error", 1e-7) == "1.000e-07"


def test_a_fingerprint_is_grouped_and_flattened():
    groups = display.fingerprint_groups({"backend": "cpu", "nproc": 2, "flags": ["-O3", "-fPIC"],
                                         "sandbox": {"seccomp": {"mode": "filter"}}, "flush": None, "omp": {}})
    assert groups[0] == {"group": "environment", "rows": [("backend", "cpu"), ("nproc", "2 CPUs"),
                                                          ("flags", "-O3 -fPIC"), ("flush", "–")]}
    assert groups[1] == {"group": "sandbox", "rows": [("seccomp.mode", "filter")]}
    assert groups[2] == {"group": "omp", "rows": [("", "none")]}
    assert display.fingerprint_groups(None) == []


def test_compute_bound_workloads_show_gflops_and_the_others_gbps():
    assert {w: display.throughput(w)["unit"] for w in ("gemm", "gemm_bias", "attention")} == \
        {"gemm": "GFLOP/s", "gemm_bias": "GFLOP/s", "attention": "GFLOP/s"}
    for w in ("rmsnorm", "softmax", "layernorm", "decode_attention", "no-such-workload"):
        assert display.throughput(w) == display.GBPS


def test_compare_deltas_are_better_or_worse_by_the_metrics_direction():
    rows = [{"name": "latency_ms", "cells": [(98.27483050000001, 0.0), (90.1, -8.3167)]},
            {"name": "gbps", "cells": [(10.0, 0.0), (8.123456789, -18.77)]},
            {"name": "reps", "cells": [(10, 0.0), (20, 100.0)]}]
    out = display.metric_cells(rows, [{"metric": "latency_ms", "direction": "minimize"}], frozenset({"gbps"}))
    assert out[0]["cells"] == [{"text": "98.27 ms", "delta": "", "quality": ""},
                               {"text": "90.1 ms", "delta": "-8.3%", "quality": "better"}]
    assert out[1]["cells"][1] == {"text": "8.123 GB/s", "delta": "-18.8%", "quality": "worse"}
    assert out[2]["cells"][1] == {"text": "20", "delta": "+100.0%", "quality": ""}  # no direction: no colour
