"""Hostile Kernel Tuner cache files built from the recorded convolution data: a half-written
last entry, legacy and string failure markers, and older layouts that lack fields."""

import gzip
import json

import pytest

from kernels import Outcome, config
from kernels.interchange.tuning_cache import LEGACY_FAILED_TIME, TuningCacheError, load_cache

DATA = config.shared_dataset_dir("tuning-cache")
pytestmark = pytest.mark.skipif(DATA is None, reason="shared/datasets/tuning-cache not found")


@pytest.fixture(scope="module")
def conv_lines():
    """(header up to and including '"cache": {', entry lines) of the convolution file, as
    Kernel Tuner's store_cache wrote them (one entry per line)."""
    text = gzip.decompress((DATA / "convolution_A100-PCIE-40GB.json.gz").read_bytes()).decode()
    head, sep, body = text.partition('"cache": {\n')
    return head + sep, body.splitlines(keepends=True)


def entry_line(key: str, entry: dict) -> str:
    """One entry as Kernel Tuner's store_cache appends it (without the leading newline)."""
    return json.dumps({key: entry})[1:-1] + ",\n"


def test_a_half_written_last_entry_is_dropped_and_named_with_its_line(tmp_path, conv_lines):
    head, lines = conv_lines
    half = lines[20][:60]  # cut inside its "times" list
    path = tmp_path / "half.json"
    path.write_text(head + "".join(lines[:20]) + half)
    cache = load_cache(path)
    assert cache.size == 20
    key = json.loads("{" + lines[20].rstrip().rstrip(",") + "}").popitem()[0]
    line = head.count("\n") + 21
    dropped = [w for w in cache.warnings if "half-written" in w]
    assert dropped == [f"dropped the half-written last entry '{key}' at line {line} "
                       f"({len(half)} chars cut off while Kernel Tuner was writing it)"]
    assert any("not closed" in w for w in cache.warnings)


def test_a_last_entry_cut_after_a_complete_value_is_not_taken_as_complete(tmp_path, conv_lines):
    # '..."time": 3.8' closes into valid JSON with '}\n}', but the entry was cut off (its
    # time may be truncated, its other fields are missing): it must be dropped, not kept.
    head, lines = conv_lines
    cut = lines[5].index('"times"') - 2
    path = tmp_path / "cut.json"
    path.write_text(head + "".join(lines[:5]) + lines[5][:cut])
    cache = load_cache(path)
    assert cache.size == 5 and any("half-written last entry" in w for w in cache.warnings)


def test_a_broken_entry_before_the_last_line_is_an_error_naming_the_line(tmp_path, conv_lines):
    head, lines = conv_lines
    path = tmp_path / "broken.json"
    path.write_text(head + "".join(lines[:3]) + lines[3][:40] + "\n" + "".join(lines[4:10]))
    with pytest.raises(TuningCacheError, match=f"line {head.count(chr(10)) + 4}: cache entry cannot be read"):
        load_cache(path)


@pytest.mark.parametrize("marker, outcome, reason", [
    ({"time": 1e20}, Outcome.runtime_error, "legacy failure marker"),
    ({"time": 1.7976931348623157e308}, Outcome.runtime_error, "legacy failure marker"),
    ({"time": 10**400}, Outcome.runtime_error, "legacy failure marker"),  # beyond any float
    ({"time": "1e+20"}, Outcome.runtime_error, "legacy failure marker"),
    ({"time": "RuntimeFailedConfig"}, Outcome.runtime_error, "recorded as RuntimeFailedConfig"),
    ({"time": "ErrorConfig"}, Outcome.runtime_error, "recorded as ErrorConfig"),
    ({"time": 2.5, "GFLOP/s": "CompilationFailedConfig"}, Outcome.compile_error, "recorded as CompilationFailedConfig"),
    ({"time": 2.5, "GFLOP/s": "InvalidConfig"}, Outcome.invalid, "recorded as InvalidConfig"),
])
def test_failure_markers_import_as_failures_not_measurements(tmp_path, conv_lines, marker, outcome, reason):
    head, lines = conv_lines
    key, entry = json.loads("{" + lines[0].rstrip().rstrip(",") + "}").popitem()
    bad = {**entry, **marker}
    path = tmp_path / "markers.json"
    path.write_text(head + entry_line(key, bad) + "".join(lines[1:10]))
    cache = load_cache(path)
    ev = cache.lookup(cache.params_of(key))
    assert ev.status == outcome and reason in ev.log
    assert "latency_ms" not in ev.metrics
    assert cache.valid_count == 9 and cache.failures() == {str(outcome): 1}
    assert cache.optimum("time")[1] < LEGACY_FAILED_TIME
    if "legacy" in reason:
        assert any("1 entries record the legacy failure marker" in w for w in cache.warnings)


def test_missing_fields_of_an_older_layout_are_warnings_naming_the_field(tmp_path, conv_lines):
    head, lines = conv_lines
    header = json.loads(head + "}}")
    for name in ("problem_size", "objective", "device_name"):
        del header[name]
    entries = [json.loads("{" + line.rstrip().rstrip(",") + "}").popitem() for line in lines[:10]]
    for _, e in entries[:4]:
        del e["times"]
    for _, e in entries:
        e.pop("timestamp", None)
        e.pop("compile_time", None)
    path = tmp_path / "old.json"
    path.write_text(json.dumps({**header, "cache": dict(entries)}))
    cache = load_cache(path)
    assert cache.size == 10 and cache.device_name == "unknown" and cache.problem_size is None
    text = "\n".join(cache.warnings)
    for field in ("'problem_size'", "'objective'", "'device_name'", "'timestamp'", "'compile_time'"):
        assert field in text, field
    assert "4 of 10 valid entries lack 'times'" in text
    assert "'kernel_name'" not in text and "'tune_params'" not in text  # present: no warning


def test_a_complete_file_has_no_warnings():
    assert load_cache(DATA / "convolution_A100-PCIE-40GB.json.gz").warnings == ()
