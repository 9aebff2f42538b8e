"""T4 results files (Kernel Tuner's ``store_output_file``) read as the caches they record."""

import gzip
import json

import pytest

from kernels import config
from kernels.interchange.tuning_cache import TuningCacheError, load_cache

DATA = config.shared_dataset_dir("tuning-cache")


def _as_t4(cache_path, out_path):
    """The cache file written as a T4 results file by Kernel Tuner's own converter."""
    from kernel_tuner import util
    from kernel_tuner.file_utils import get_t4_results

    data = json.loads(gzip.decompress(cache_path.read_bytes()))
    markers = {"RuntimeFailedConfig": util.RuntimeFailedConfig(), "CompilationFailedConfig": util.CompilationFailedConfig(),
               "InvalidConfig": util.InvalidConfig()}
    results = []
    for entry in data["cache"].values():
        result = {"compile_time": 0, "benchmark_time": 0, "framework_time": 0, "strategy_time": 0,
                  "verification_time": 0, **entry}
        if isinstance(result.get("time"), str):  # Kernel Tuner's results carry a failure as __error__
            result["__error__"] = markers[result.pop("time")]
        results.append(result)
    out_path.write_text(json.dumps(get_t4_results(results, data["tune_params"]), cls=util.NpEncoder))
    return out_path


@pytest.mark.skipif(DATA is None, reason="shared/datasets/tuning-cache not found")
def test_a_t4_file_of_a_recorded_cache_reads_as_that_cache(tmp_path):
    source = DATA / "pnpoly_RTX-2080-Ti.json.gz"
    cache, t4 = load_cache(source), load_cache(_as_t4(source, tmp_path / "pnpoly_T4.json"))
    assert (t4.size, t4.valid_count, t4.failures()) == (cache.size, cache.valid_count, cache.failures())
    assert dict(t4.tune_params) == dict(cache.tune_params) and t4.tune_params_keys == cache.tune_params_keys
    assert t4.optimum() == cache.optimum()
    best = cache.optimum()[0]
    assert t4.lookup(best).metrics["latency_median_ms"] == cache.lookup(best).metrics["latency_median_ms"]
    assert any("T4 results file records no tunable parameter values" in w for w in t4.warnings)


def _t4(tmp_path, results, **extra):
    path = tmp_path / "run_T4.json"
    path.write_text(json.dumps({"schema_version": "1.0.0", "results": results, **extra}))
    return path


def _result(config, value, *, unit="ms", invalidity="correct", name="time", runtimes=()):
    return {"configuration": config, "invalidity": invalidity, "correctness": 1, "objectives": [name],
            "times": {"compilation": 5.0, "runtimes": list(runtimes)},
            "measurements": [{"name": name, "value": value, "unit": unit}] if invalidity == "correct" else []}


def test_units_failures_repeats_and_value_order_of_a_t4_file(tmp_path):
    wrong = _result({"bx": 64, "unroll": "none"}, 0.5)
    wrong["correctness"] = 0  # judged wrong although "correct"
    path = _t4(tmp_path, [
        _result({"bx": 64, "unroll": "full"}, 0.002, unit="s", runtimes=[0.002, 0.003]),
        _result({"bx": 16, "unroll": "none"}, 1.5),
        _result({"bx": 32, "unroll": "full"}, None, invalidity="compile"),
        _result({"bx": 16, "unroll": "full"}, None, invalidity="timeout"),
        _result({"bx": 16.0, "unroll": "none"}, 9.0),  # the same configuration again: the first result stands
        wrong,
    ], metadata={"timeunit": "seconds"})
    cache = load_cache(path)
    assert dict(cache.tune_params) == {"bx": (16, 32, 64), "unroll": ("full", "none")}  # numbers ascending
    assert cache.size == 5 and cache.optimum() == ({"bx": 16, "unroll": "none"}, 1.5)
    assert cache.lookup({"bx": 16.0, "unroll": "none"}).metrics["latency_ms"] == 1.5
    ev = cache.lookup({"bx": 64, "unroll": "full"})
    assert ev.metrics["latency_ms"] == pytest.approx(2.0) and ev.samples_ms["recorded"] == pytest.approx([2.0, 3.0])
    assert ev.metrics["compile_ms"] == 5000.0  # the file's time unit covers every time
    assert cache.status("32,full")[0] == "compile_error"
    assert cache.status("16,full") == ("runtime_error", "recorded error: timeout")
    assert cache.status("64,none") == ("runtime_error", "recorded error: correctness")
    assert any("1 results repeat a configuration" in w for w in cache.warnings)


def test_values_of_other_kinds_stay_apart_in_a_t4_file(tmp_path):
    first = _result({"flag": True}, 1.0)
    first["times"] = {"compilation_time": 7.0}  # the schema's name for Kernel Tuner's "compilation"
    cache = load_cache(_t4(tmp_path, [first, _result({"flag": 1}, 2.0), _result({"flag": "1"}, 3.0)]))
    assert cache.size == 2 and cache.lookup({"flag": True}).metrics["compile_ms"] == 7.0
    assert cache.lookup({"flag": 1}).metrics["latency_ms"] == 2.0
    # "1" prints as 1 does, and a Kernel Tuner key is the printed values: left out, and said so
    assert cache.lookup({"flag": "1"}).status == "invalid"
    assert any("1 results configure values that print as an earlier result's do" in w for w in cache.warnings)


def test_a_t4_file_of_scores_is_searched_for_the_highest(tmp_path):
    path = _t4(tmp_path, [_result({"c1": c}, s, unit="", name="score") for c, s in ((1.0, -0.4), (2.0, 0.2), (3.0, -0.1))])
    cache = load_cache(path)
    assert (cache.searched, cache.maximize) == ("score", True) and cache.optimum() == ({"c1": 2.0}, 0.2)
    # an objective whose name gives no direction, with the file's own flag (not in the schema)
    rows = [_result({"c1": c}, s, unit="", name="accuracy") for c, s in ((1.0, 0.4), (2.0, 0.9))]
    rows[1]["correctness"] = "1"
    cache = load_cache(_t4(tmp_path, rows, metadata={"objective_higher_is_better": True}))
    assert (cache.searched, cache.maximize) == ("accuracy", True) and cache.optimum() == ({"c1": 2.0}, 0.9)
    rows[1]["correctness"] = "0"  # judged wrong, as text
    assert load_cache(_t4(tmp_path, rows, objective_higher_is_better=True)).optimum() == ({"c1": 1.0}, 0.4)


def test_numbers_beyond_any_float_in_a_t4_file_are_not_measurements(tmp_path):
    cache = load_cache(_t4(tmp_path, [_result({"a": 1}, 10**400), _result({"a": 2}, 2.0, runtimes=[10**400, 2.0])]))
    assert cache.status("1")[0] == "runtime_error" and cache.optimum() == ({"a": 2}, 2.0)


@pytest.mark.parametrize("results, extra, message", [
    ([], {}, "without results"),
    ([{"invalidity": "correct"}], {}, "result 0 has no 'configuration'"),
    ([_result({"a": 1}, 1.0), _result({"b": 1}, 1.0)], {}, r"result 1 configures \['b'\], result 0 \['a'\]"),
    ([_result({"a": [1, 2]}, 1.0)], {}, "parameter 'a' is \\[1, 2\\]"),
    ([_result({"a": 1}, 1.0)], {"metadata": {"timeunit": "fortnights"}}, "unit 'fortnights' is not a time unit"),
])
def test_a_t4_file_that_cannot_be_read_is_a_clear_error(tmp_path, results, extra, message):
    with pytest.raises(TuningCacheError, match=message):
        load_cache(_t4(tmp_path, results, **extra))


def test_neither_a_cache_nor_t4_results_says_both(tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"rows": []}))
    with pytest.raises(TuningCacheError, match="no 'cache' object.*nor a T4 results file"):
        load_cache(path)
