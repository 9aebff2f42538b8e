"""The replay backend answers evaluations from recorded Kernel Tuner cache files."""

import dataclasses
import gzip
import itertools
import json
import math
import os

import pytest

import kernels.evaluation.pipeline
from kernels import Outcome, config, evaluate
from kernels.backends import BACKENDS, get_backend, replay
from kernels.backends.replay import ReplayBackend, list_datasets, lookup_point, register_dataset
from kernels.interchange import tuning_cache
from kernels.interchange.tuning_cache import NOT_RECORDED_LOG, TuningCacheError, load_cache

DATA = config.shared_dataset_dir("tuning-cache")
pytestmark = pytest.mark.skipif(DATA is None, reason="shared/datasets/tuning-cache not found")

CONV = "convolution_A100-PCIE-40GB"
GEMM = "gemm-clblast-xgemm_RTX-3090"
ENERGY = "gemm-xgemm-energy_A100-PCIE-40GB_partial"
PNPOLY = "pnpoly_RTX-2080-Ti"

# From shared/datasets/tuning-cache/README.md: entries, valid, failures, cartesian size, sha256.
README = {
    CONV: (4362, 4201, {"runtime_error": 155, "compile_error": 6}, 10240,
           "c95e4e2a500bd71172fd00dec9670cb82e29a35e0c1ea897409a94b0bb215d89"),
    GEMM: (17956, 17956, {}, 82944, "afa4045f9be7c1b717bace33886907fff0b35238216bf8d956d3d86a0b0999a0"),
    PNPOLY: (4092, 3734, {"runtime_error": 358}, 4092,
             "27892b9bc4c29b7500829f45893771d5c567bd47efa11531a94934cd63113d0b"),
    ENERGY: (898, 898, {}, None, "2651e0dd8bc6dc1128dc3cc61c4793d3aaf7ca3800f8b6887dba3beb6b44b87f"),
}
CONV_KEY = "16,1,1,1,0,0,0,1,15,15"  # first entry of the convolution file
CONV_PARAMS = dict(block_size_x=16, block_size_y=1, tile_size_x=1, tile_size_y=1, read_only=0,
                   use_padding=0, use_shmem=0, use_cmem=1, filter_height=15, filter_width=15)


def files():
    return sorted(p for p in DATA.iterdir() if p.name.endswith((".json", ".json.gz"))) if DATA else []


@pytest.fixture
def conv():
    return load_cache(DATA / f"{CONV}.json.gz")


@pytest.fixture
def private_registry(monkeypatch):
    """Registrations made by a test do not leak into other tests."""
    monkeypatch.setattr(replay, "_registered", {})


# -- loading ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", files(), ids=lambda p: p.name)
def test_every_recorded_file_loads_with_the_readme_counts(path):
    cache = load_cache(path)
    assert cache.size > 0 and cache.tune_params_keys and cache.device_name.startswith(("NVIDIA", "AMD"))
    if cache.name in README:
        size, valid, failures, cartesian, sha = README[cache.name]
        assert (cache.size, cache.valid_count, cache.failures(), cache.sha256) == (size, valid, failures, sha)
        assert cache.failed_count == size - valid
        if cartesian:
            assert cache.cartesian_size() == cartesian == cache.space().cartesian_size()


def test_the_readme_files_are_present():
    names = {p.name.split(".json")[0] for p in files()}
    assert {CONV, GEMM, ENERGY} <= names


def test_the_unterminated_energy_file_is_repaired_and_lacks_header_fields():
    cache = load_cache(DATA / f"{ENERGY}.json.gz")
    assert "appended the missing closing" in cache.repaired
    assert cache.problem_size is None and cache.objective == "time" and cache.kernel_name == "Xgemm"
    assert {"time", "nvml_energy", "GFLOP/s", "GFLOPS/W"} <= set(cache.objectives_available)
    assert cache.objectives_available[0] == "time"


def test_the_big_gemm_file_is_parsed_once_per_process():
    path = DATA / f"{GEMM}.json.gz"
    tuning_cache._load.cache_clear()
    cache = load_cache(path)
    again = load_cache(path)
    assert again is cache
    assert tuning_cache._load.cache_info().misses == 1


class _NoScan(dict):
    """The entries of a cache file, refusing any walk over them: a lookup must be one hash probe."""

    def _refuse(self, *a, **kw):
        raise AssertionError("a lookup walked the recorded entries")

    __iter__ = keys = values = items = _refuse


def test_a_lookup_is_one_hash_probe_not_a_scan(conv):
    expected = conv.lookup(CONV_PARAMS)
    again = dataclasses.replace(conv, entries=_NoScan(conv.entries)).lookup(CONV_PARAMS)
    assert again.status == expected.status and again.metrics == expected.metrics


def test_plain_json_and_gzip_give_the_same_cache(tmp_path, conv):
    plain = tmp_path / f"{CONV}.json"
    plain.write_bytes(gzip.decompress((DATA / f"{CONV}.json.gz").read_bytes()))
    copy = load_cache(plain)
    assert (copy.name, copy.size, copy.sha256) == (conv.name, conv.size, conv.sha256)
    assert copy.lookup(CONV_PARAMS).metrics == conv.lookup(CONV_PARAMS).metrics


def test_a_truncated_copy_still_loads(tmp_path):
    text = gzip.decompress((DATA / f"{CONV}.json.gz").read_bytes()).decode()
    head, sep, body = text.partition('"cache": {\n')
    lines = body.splitlines(keepends=True)
    cut = tmp_path / "cut.json"
    cut.write_text(head + sep + "".join(lines[:100]))  # ends with "},\n" like a running tuner
    cache = load_cache(cut)
    assert cache.size == 100 and cache.name == "cut" and cache.repaired
    half = tmp_path / "half.json.gz"
    half.write_bytes(gzip.compress((head + sep + "".join(lines[:100]) + lines[100][:57]).encode()))
    cache = load_cache(half)
    assert cache.size == 100 and "half-written" in cache.repaired


def test_a_file_with_a_minimal_header_and_newer_error_fields(tmp_path):
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps({
        "tune_params_keys": ["A", "B"],
        "cache": {
            "1,0.5": {"A": 1, "B": 0.5, "time": 2.0, "times": [1.9, 2.0, 2.1]},
            "2,0.5": {"A": 2, "B": 0.5, "time": 1.0, "nvml_energy": 0.2},
            "2,1.0": {"A": 2, "B": 1.0, "time": 9.9, "__error__": "CompilationFailedConfig"},
            "1,1.0": {"A": 1, "B": 1.0, "time": "InvalidConfig"},
        },
    }))
    cache = load_cache(path)
    assert cache.device_name == "unknown" and cache.problem_size is None and cache.objective == "time"
    assert dict(cache.tune_params) == {"A": (1, 2), "B": (0.5, 1.0)}  # inferred from the entries
    assert cache.lookup({"A": 2, "B": 1}).status == Outcome.compile_error  # 1 finds the recorded 1.0
    assert cache.lookup({"A": 1.0, "B": 1.0}).status == Outcome.invalid
    ev = cache.lookup({"A": 2, "B": 0.5})
    assert ev.status == Outcome.ok and ev.metrics["power_w"] == pytest.approx(0.2 / 1e-3)
    assert ev.samples_ms == {} and "latency_median_ms" not in ev.metrics
    assert cache.optimum() == ({"A": 2, "B": 0.5}, 1.0)


def test_non_cache_files_raise_a_clear_error(tmp_path):
    (tmp_path / "x.json").write_text('{"hello": 1}')
    with pytest.raises(TuningCacheError, match="no 'cache' object"):
        load_cache(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("not json at all")
    with pytest.raises(TuningCacheError, match="not valid JSON"):
        load_cache(tmp_path / "y.json")
    with pytest.raises(FileNotFoundError):
        load_cache(tmp_path / "missing.json")


# -- lookup ----------------------------------------------------------------------------------


def _labelled(path, tune_params, entries):
    """A cache file of parameters ``a`` and ``b``: ``entries`` are ``(a, b, time)``."""
    keys = list(tune_params)
    path.write_text(json.dumps({"tune_params_keys": keys, "tune_params": tune_params, "cache": {
        ",".join(map(str, (a, b))): {"a": a, "b": b, "time": t} for a, b, t in entries}}))
    return load_cache(path)


def test_parameters_with_values_that_are_not_numbers_are_searched_by_position(tmp_path, private_registry):
    # Kernel Tuner records any JSON scalar as a value (benchmark_hub's hyperparameter caches
    # tune diff_evo's "method": "best1bin", ...); the space numbers them in the file's order.
    path = tmp_path / "labels.json"
    cache = _labelled(path, {"a": ["rand1bin", "best1bin", 0, None], "b": [32, 64]},
                      [("rand1bin", 32, 3.0), ("best1bin", 64, 1.0), (0, 64, 2.0), (None, 32, 4.0)])
    assert cache.labels == {"a": ("rand1bin", "best1bin", 0, None)}
    space = cache.space()
    assert [p.values for p in space.parameters] == [(0, 1, 2, 3), (32, 64)]
    assert [cache.point_of(k) for k in cache.entries] == [
        {"a": 0, "b": 32}, {"a": 1, "b": 64}, {"a": 2, "b": 64}, {"a": 3, "b": 32}]
    assert cache.optimum() == ({"a": "best1bin", "b": 64}, 1.0)
    assert cache.space_point(cache.optimum()[0]) == {"a": 1, "b": 64}
    # the cache takes recorded values, the backend the space's positions: 0 is never both
    assert cache.lookup({"a": 0, "b": 64}).metrics["latency_ms"] == 2.0
    assert cache.lookup({"a": 0, "b": 32}).metrics == {"not_recorded": True}
    assert lookup_point(cache, {"a": 0, "b": 32}).metrics["latency_ms"] == 3.0
    assert lookup_point(cache, {"a": 2, "b": 64}).metrics["latency_ms"] == 2.0
    assert lookup_point(cache, {"a": 3, "b": 32}).metrics["latency_ms"] == 4.0
    assert "not one of the recorded values" in lookup_point(cache, {"a": 4, "b": 32}).log
    name = register_dataset(path, "labels-test")
    from kernels.space import DesignSpace

    assert DesignSpace.from_dict(space.to_dict() | {"domain": f"replay:{name}"}).contains({"a": 3, "b": 32})
    assert evaluate("labels", "", {"a": 1, "b": 64}, target=f"replay:{name}").metrics["latency_ms"] == 1.0


def test_values_that_python_thinks_equal_but_json_keeps_apart_are_different_configurations(tmp_path):
    # True == 1 and "1" has the text of 1: each entry keeps its own time, by position and by value
    cache = _labelled(tmp_path / "kinds.json", {"a": [1, True, "1"], "b": [0, 1]},
                      [(1, 0, 1.0), (True, 0, 5.0), (1, 1, 2.0), (True, 1, 6.0), ("1", 1, 7.0)])
    assert cache.size == 4  # the file's object holds one entry per key: "1,1" is the last, "1" and 1
    assert [lookup_point(cache, {"a": a, "b": b}).metrics.get("latency_ms") for a, b in
            ((0, 0), (1, 0), (1, 1), (2, 1))] == [1.0, 5.0, 6.0, 7.0]
    assert cache.optimum() == ({"a": 1, "b": 0}, 1.0)
    # 1,1 has the text of the entry recorded for "1",1: never that configuration's time
    assert lookup_point(cache, {"a": 0, "b": 1}).metrics == {"not_recorded": True}
    assert cache.lookup({"a": 1.0, "b": 0}).metrics["latency_ms"] == 1.0  # 1.0 is the number 1


def test_entries_with_a_value_tune_params_lacks_are_named_in_a_warning(tmp_path):
    cache = _labelled(tmp_path / "outside.json", {"a": ["p", "q"], "b": [0, 1]},
                      [("p", 0, 2.0), ("r", 0, 1.0), ("q", 1, 3.0), ("q", 2, 0.5)])
    assert [w for w in cache.warnings if "'tune_params' lacks" in w] == [
        "2 entries record a value that 'tune_params' lacks (first: entry 'r,0', a = \"r\"): they lie outside the "
        "search space, and no search proposes them"]
    assert not any("'tune_params' lacks" in w for w in load_cache(DATA / f"{PNPOLY}.json.gz").warnings)


def test_a_value_recorded_twice_is_refused_as_in_a_numeric_parameter(tmp_path):
    from kernels.space import SpaceError

    cache = _labelled(tmp_path / "twice.json", {"a": ["p", "q", "p"], "b": [0]}, [("p", 0, 1.0)])
    with pytest.raises(SpaceError, match=r"parameter 'a': duplicate values \['p'\]"):
        cache.space()


def test_a_recorded_valid_config_returns_its_time_and_samples(conv):
    rec = conv.entries[CONV_KEY]
    ev = conv.lookup(CONV_PARAMS)
    assert ev.status == Outcome.ok
    assert ev.metrics["latency_ms"] == rec["time"] == pytest.approx(3.8753279224038124)
    assert ev.samples_ms == {"problem_size=4096x4096": rec["times"]} and len(rec["times"]) == 32
    assert ev.metrics["latency_ci_low_ms"] <= ev.metrics["latency_median_ms"] <= ev.metrics["latency_ci_high_ms"]
    assert ev.metrics["latency_iqr_ms"] >= 0
    assert ev.metrics["gflops"] == rec["GFLOP/s"]
    assert ev.metrics["compile_ms"] == rec["compile_time"] and ev.metrics["benchmark_ms"] == rec["benchmark_time"]
    assert ev.fingerprint["sha256"] == README[CONV][4] and ev.fingerprint["device_name"] == "NVIDIA A100-PCIE-40GB"
    assert json.dumps(ev.to_dict(), allow_nan=False)


def test_int_and_float_spellings_find_the_same_entry(conv):
    as_floats = {k: float(v) for k, v in CONV_PARAMS.items()}
    assert conv.key(as_floats) == CONV_KEY
    assert conv.lookup(as_floats).metrics == conv.lookup(CONV_PARAMS).metrics


@pytest.mark.parametrize("marker, outcome", [
    ("RuntimeFailedConfig", Outcome.runtime_error),
    ("CompilationFailedConfig", Outcome.compile_error),
])
def test_a_failed_config_has_the_recorded_status(conv, marker, outcome):
    key = next(k for k, rec in conv.entries.items() if rec["time"] == marker)
    ev = conv.lookup(conv.params_of(key))
    assert ev.status == outcome and marker in ev.log
    assert "latency_ms" not in ev.metrics and ev.samples_ms == {}
    assert ev.metrics["compile_ms"] == conv.entries[key]["compile_time"]


def test_an_absent_config_is_invalid_and_flagged_not_recorded(conv):
    space = conv.space()
    missing = next(p for p in (dict(zip(space.names, c)) for c in itertools.product(*(p.values for p in space.parameters)))
                   if conv.key(p) not in conv.entries)
    assert space.contains(missing)
    ev = conv.lookup(missing)
    assert ev.status == Outcome.invalid and NOT_RECORDED_LOG in ev.log
    assert ev.metrics == {"not_recorded": True}


@pytest.mark.parametrize("change, words", [
    ({"block_size_x": 17}, "parameter 'block_size_x' = 17 is not one of the recorded values"),
    ({"block_size_x": "16"}, "parameter 'block_size_x'"),
    ({"block_size_x": None}, "parameter 'block_size_x'"),
    ({"bogus": 1}, "unknown parameter(s) bogus"),
])
def test_values_outside_the_recorded_space_are_invalid_with_the_parameter_named(conv, change, words):
    ev = conv.lookup({**CONV_PARAMS, **change})
    assert ev.status == Outcome.invalid and words in ev.log
    assert "not_recorded" not in ev.metrics


def test_a_missing_parameter_is_named(conv):
    params = dict(CONV_PARAMS)
    del params["use_cmem"]
    ev = conv.lookup(params)
    assert ev.status == Outcome.invalid and "missing parameter 'use_cmem'" in ev.log


def test_energy_entries_report_energy_and_power():
    cache = load_cache(DATA / f"{ENERGY}.json.gz")
    key = next(iter(cache.entries))
    rec = cache.entries[key]
    ev = cache.lookup(cache.params_of(key))
    assert ev.metrics["energy_j"] == rec["nvml_energy"]
    assert ev.metrics["power_w"] == pytest.approx(rec["nvml_energy"] / (rec["time"] * 1e-3))
    assert ev.metrics["gflops_per_w"] == rec["GFLOPS/W"]
    assert 100 < ev.metrics["power_w"] <= 300  # an A100-PCIE under a 250 W limit, with NVML noise
    assert list(ev.samples_ms) == ["recorded"]


# -- optimum and space -----------------------------------------------------------------------


@pytest.mark.parametrize("name", [CONV, GEMM, ENERGY])
def test_the_optimum_matches_a_brute_force_minimum(name):
    cache = load_cache(next(p for p in files() if p.name.startswith(name + ".json")))
    valid = {k: r for k, r in cache.entries.items() if isinstance(r.get("time"), float)}
    best_key = min(valid, key=lambda k: valid[k]["time"])
    params, value = cache.optimum("time")
    assert value == valid[best_key]["time"] and cache.key(params) == best_key
    assert cache.optimum("latency_ms") == (params, value)


def test_rates_are_maximised_and_energy_minimised():
    cache = load_cache(DATA / f"{ENERGY}.json.gz")
    _, fastest = cache.optimum("GFLOP/s")
    assert fastest == max(r["GFLOP/s"] for r in cache.entries.values())
    _, least = cache.optimum("energy_j")
    assert least == min(r["nvml_energy"] for r in cache.entries.values())
    with pytest.raises(KeyError, match="records"):
        cache.optimum("no-such-field")


def test_a_file_without_times_is_searched_on_its_objective_in_its_direction(tmp_path):
    """Kernel Tuner's hyperparameter tuner writes ``"objective": "score"`` (maximised) and no
    ``time``: a negative score is a measurement, not a failed time. The header's objective is
    searched where entries record it, in the header's ``objective_higher_is_better`` or the
    direction its name gives; else the recorded time."""
    entries = {"1": {"a": 1, "score": -0.4, "scores": [-0.4]}, "2": {"a": 2, "score": 0.25},
               "3": {"a": 3, "score": "RuntimeFailedConfig"}, "4": {"a": 4, "score": None}}
    path = tmp_path / "hyper.json"
    path.write_text(json.dumps({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2, 3, 4]}, "objective": "score",
                                "cache": entries}))
    cache = load_cache(path)
    assert (cache.searched, cache.maximize, cache.metric) == ("score", True, "score")
    assert [cache.status(k)[0] for k in "1234"] == ["ok", "ok", "runtime_error", "runtime_error"]
    assert cache.optimum() == ({"a": 2}, 0.25)
    ev = cache.lookup({"a": 1})
    assert ev.status == "ok" and ev.metrics["score"] == -0.4 and "latency_ms" not in ev.metrics and not ev.samples_ms
    timed = tmp_path / "timed.json"
    timed.write_text(json.dumps({"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]}, "objective": "GFLOP/s",
                                 "cache": {"1": {"a": 1, "time": 2.0, "GFLOP/s": 5.0},
                                           "2": {"a": 2, "time": 1.0, "GFLOP/s": 10.0}}}))
    cache = load_cache(timed)
    assert (cache.searched, cache.maximize, cache.metric) == ("GFLOP/s", True, "gflops")
    assert cache.optimum() == ({"a": 2}, 10.0)
    ev = cache.lookup({"a": 1})  # searched on GFLOP/s, the recorded time still reported
    assert ev.metrics["gflops"] == 5.0 and ev.metrics["latency_ms"] == 2.0

    def header(objective, **extra):
        data = {"tune_params_keys": ["a"], "tune_params": {"a": [1, 2]}, "objective": objective, **extra,
                "cache": {"1": {"a": 1, "time": 2.0, "widgets": 5.0}, "2": {"a": 2, "time": 1.0, "widgets": 3.0}}}
        timed.write_text(json.dumps(data))
        return load_cache(timed)

    cache = header("widgets")  # no direction: the recorded time, and a warning says so
    assert cache.searched == "time" and any("'widgets' does not say whether higher is better" in w for w in cache.warnings)
    cache = header("widgets", objective_higher_is_better=True)
    assert (cache.searched, cache.maximize) == ("widgets", True) and cache.optimum() == ({"a": 1}, 5.0)
    cache = header("GB/s")  # recorded by no entry
    assert cache.searched == "time" and any("no entry records the header's objective 'GB/s'" in w for w in cache.warnings)
    for taken in ("a", "candidate", "compile_ms", "gflops", "latency_ms"):  # a parameter, an entry's own field, a metric
        with pytest.raises(TuningCacheError, match="is also the name of a tunable parameter or of a field"):
            header(taken)
    for flag in ("true", 1):
        with pytest.raises(TuningCacheError, match="'objective_higher_is_better' is .*: give true or false"):
            header("widgets", objective_higher_is_better=flag)
    with pytest.raises(TuningCacheError, match="a time is minimised"):
        header("time", objective_higher_is_better=True)
    data = json.loads(timed.read_text())
    data["objective"], data["objective_higher_is_better"] = "widgets", False
    del data["cache"]["2"]["widgets"]  # recorded by one entry of two
    timed.write_text(json.dumps(data))
    cache = load_cache(timed)
    assert cache.searched == "widgets" and cache.status("2")[0] == "runtime_error"
    assert any("1 of 2 entries record no 'widgets', the objective searched" in w for w in cache.warnings)
    assert [tuning_cache.higher_is_better(f) for f in ("time", "score", "GB/s", "TFLOP/J", "widgets")] == [
        False, True, True, True, None]
    assert [tuning_cache.metric_name(f) for f in ("time", "GFLOP/s", "score", "my metric", "9x")] == [
        "latency_ms", "gflops", "score", "my_metric", "m_9x"]


def test_the_space_is_the_recorded_cartesian_product(conv):
    space = conv.space()
    assert space.names == conv.tune_params_keys and space.restrictions == ()
    assert all(space.contains(conv.params_of(k)) for k in itertools.islice(conv.entries, 50))


# -- backend and evaluate --------------------------------------------------------------------


def test_the_registry_builds_the_replay_backend_lazily():
    assert BACKENDS["replay"] == "kernels.backends.replay:ReplayBackend"
    be = get_backend("replay")
    assert isinstance(be, ReplayBackend)
    assert be.supports(f"replay:{GEMM}") and not be.supports("replay:nope") and not be.supports("cpu-x86_64")
    assert be.fingerprint() == {"backend": "replay", "format": "kernel_tuner_cache"}
    fp = be.fingerprint(f"replay:{GEMM}")
    assert fp["sha256"] == README[GEMM][4] and fp["dataset"] == GEMM and fp["device_name"] == "NVIDIA GeForce RTX 3090"
    assert ReplayBackend(f"replay:{CONV}").lookup(CONV_PARAMS).status == Outcome.ok


def test_datasets_are_found_by_name():
    assert {CONV, GEMM, ENERGY} <= set(list_datasets())
    with pytest.raises(KeyError, match="unknown replay data set 'nope'"):
        replay.dataset_path("nope")


def test_evaluate_replays_without_compiling_or_starting_a_child(monkeypatch, conv):
    def forbidden(*a, **k):
        raise AssertionError("replay must not compile or run anything")

    monkeypatch.setattr(kernels.evaluation.pipeline, "start_child", forbidden)
    monkeypatch.setattr("kernels.backends.cpu.CpuBackend.compile", forbidden)
    ev = evaluate("convolution_kernel", "ignored", CONV_PARAMS, backend="replay", target=f"replay:{CONV}")
    assert ev.status == Outcome.ok and ev.metrics == conv.lookup(CONV_PARAMS).metrics
    assert "differs" not in ev.log
    also = evaluate("convolution_kernel", "", CONV_PARAMS, target=f"replay:{CONV}")  # target implies replay
    assert also.metrics == ev.metrics
    other = evaluate("gemm", "", CONV_PARAMS, backend="replay", target=f"replay:{CONV}")
    assert "workload 'gemm' differs from the recorded kernel 'convolution_kernel'" in other.log


def test_evaluate_names_what_is_missing():
    with pytest.raises(ValueError, match="needs target='replay:<dataset>'"):
        evaluate("Xgemm", "", {}, backend="replay")
    with pytest.raises(ValueError, match="replay:<dataset>"):
        evaluate("Xgemm", "", {}, backend="replay", target="cpu-x86_64")
    with pytest.raises(KeyError, match="unknown replay data set"):
        evaluate("Xgemm", "", {}, target="replay:nope")


def test_register_dataset_adds_an_arbitrary_file(tmp_path, private_registry):
    path = tmp_path / "mine.json.gz"
    path.write_bytes((DATA / f"{CONV}.json.gz").read_bytes())
    assert register_dataset(path) == "mine"
    assert register_dataset(path) == "mine"  # idempotent
    assert "mine" in list_datasets()
    ev = evaluate("convolution_kernel", "", CONV_PARAMS, target="replay:mine")
    assert ev.status == Outcome.ok and ev.fingerprint["dataset"] == "mine"
    other = tmp_path / "other" / "mine.json"
    other.parent.mkdir()
    other.write_bytes(gzip.decompress(path.read_bytes()))
    with pytest.raises(ValueError, match="already registered"):
        register_dataset(other)
    assert register_dataset(other, name="mine-plain") == "mine-plain"


def test_replay_dirs_come_from_the_environment(tmp_path, monkeypatch, private_registry):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "one.json.gz").write_bytes((DATA / f"{CONV}.json.gz").read_bytes())
    (tmp_path / "b" / "two.json").write_text('{"tune_params_keys": ["A"], "cache": {"1": {"A": 1, "time": 1.0}}}')
    (tmp_path / "b" / "notes.txt").write_text("not a data set")
    monkeypatch.setenv("KERNELS_REPLAY_DIRS", os.pathsep.join(str(tmp_path / d) for d in ("a", "b", "absent")))
    assert list_datasets() == ["one", "two"]
    assert evaluate("k", "", {"A": 1}, target="replay:two").metrics["latency_ms"] == 1.0
    assert math.isclose(evaluate("k", "", CONV_PARAMS, target="replay:one").metrics["latency_ms"], 3.8753279224038124)


def test_logs_say_whether_outputs_were_verified_and_why_a_config_is_absent():
    gemm = load_cache(DATA / f"{GEMM}.json.gz")
    assert "outputs verified by Kernel Tuner" in gemm.lookup(gemm.params_of(next(iter(gemm.entries)))).log
    conv = load_cache(DATA / f"{CONV}.json.gz")
    assert "no output verification recorded" in conv.lookup(CONV_PARAMS).log
    energy = load_cache(DATA / f"{ENERGY}.json.gz")
    params = {**energy.params_of(next(iter(energy.entries))), "nvml_pwr_limit": 150}  # only 250 W was run
    ev = energy.lookup(params)
    assert ev.status == Outcome.invalid and ev.metrics == {"not_recorded": True}
    assert NOT_RECORDED_LOG in ev.log and "partial (unterminated) run" in ev.log
