"""T4 results files (the open autotuning results schema Kernel Tuner writes with
``store_output_file``) read into the layout of a Kernel Tuner cache file.

Format (``kernel_tuner/schema/T4/1.0.0/results-schema.json``; benchmark_hub keeps such files
as ``*_T4.json.gz`` beside its caches)::

    {"schema_version": "1.0.0", "metadata": {"timeunit": "milliseconds"},
     "results": [{"timestamp": str, "configuration": {<param>: value, ...},
                  "times": {"compilation": ms, "benchmark": ms, "framework": ms,
                            "search_algorithm": ms, "validation": ms, "runtimes": [ms, ...]},
                  "invalidity": "correct" | "compile" | "runtime" | "constraints" | "timeout" | "correctness",
                  "correctness": 1,
                  "measurements": [{"name": "time", "value": 1.23, "unit": "ms"}, ...],
                  "objectives": ["time"]}, ...]}

A results file records neither the device, the kernel nor the tunable parameters' values
(the metadata file beside it holds the first two): each parameter's values are those its
configurations record, numbers in ascending order (the order Kernel Tuner users write them in;
a search's neighbourhoods follow it), other values in first-seen order.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from kernels.interchange.values import finite_number, value_kind

__all__ = ["T4Error", "as_cache_layout", "is_t4"]

# T4 invalidity -> Kernel Tuner's failure marker (``kernel_tuner/file_utils.py`` maps the other way).
_FAILURES = {"compile": "CompilationFailedConfig", "runtime": "RuntimeFailedConfig", "constraints": "InvalidConfig"}
# T4 ``times`` -> Kernel Tuner's per-entry bookkeeping fields (ms); the schema names the first
# ``compilation_time``, Kernel Tuner's writer ``compilation``.
_TIMES = {"compilation": "compile_time", "compilation_time": "compile_time", "benchmark": "benchmark_time",
          "framework": "framework_time", "search_algorithm": "strategy_time", "validation": "verification_time"}
# A measurement's unit -> factor to milliseconds; "" is Kernel Tuner's unit for whatever is not a time.
_TO_MS = {"ms": 1.0, "milliseconds": 1.0, "s": 1e3, "seconds": 1e3, "us": 1e-3, "µs": 1e-3, "microseconds": 1e-3,
          "ns": 1e-6, "nanoseconds": 1e-6}


class T4Error(ValueError):
    """A T4 results file that cannot be read as recorded configurations; the message says why."""


def is_t4(data: Any) -> bool:
    """Whether parsed JSON ``data`` is a T4 results file: an object with a ``results`` list and
    no Kernel Tuner ``cache``."""
    return isinstance(data, dict) and "cache" not in data and isinstance(data.get("results"), list)


def as_cache_layout(data: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The T4 results ``data`` as a Kernel Tuner cache file's object, and warnings.

    Each result becomes an entry keyed as Kernel Tuner keys its caches (the values' ``str``
    joined by ``,``; a value recorded as ``4`` and as ``4.0`` is spelt as first recorded):
    its configuration, each measurement by name (a time unit converted to ms), ``times`` from
    ``times.runtimes`` and the bookkeeping times under Kernel Tuner's names (ms, by the file's
    ``metadata.timeunit``), and for an ``invalidity`` other than ``correct`` (or a
    ``correctness`` of 0) an ``__error__`` marker (``compile``, ``runtime``, ``constraints``
    as Kernel Tuner's; ``timeout`` and others as their word). The objective is the first
    result's first ``objectives`` entry (``time`` when absent), with the file's
    ``objective_higher_is_better`` (top level or in ``metadata``) where it gives one. A configuration recorded twice
    keeps its first result, and a warning counts the others.

    Raises:
        T4Error: no results; a result that is not an object or lacks ``configuration``; a
            configuration whose parameters differ from the first one's, or that records a
            list or object; a ``metadata.timeunit`` not in :data:`_TO_MS`.
    """
    results = data["results"]
    if not results:
        raise T4Error("a T4 results file without results: nothing was recorded")
    first = results[0]
    if not isinstance(first, dict) or not isinstance(first.get("configuration"), dict) or not first["configuration"]:
        raise T4Error("result 0 has no 'configuration' object: not a T4 results file")
    keys = list(first["configuration"])
    metadata = data.get("metadata") if isinstance(data.get("metadata"), dict) else {}
    runtime_ms = _factor(metadata.get("timeunit", "ms"), "metadata.timeunit")
    objectives = first.get("objectives")
    objective = str(objectives[0]) if isinstance(objectives, list) and objectives else "time"
    cache: dict[str, dict[str, Any]] = {}
    # one spelling per value: 4 and 4.0 are one configuration, True and 1 or "1" and 1 are not
    spelling: dict[str, dict[tuple, Any]] = {k: {} for k in keys}
    repeated = clashes = 0
    for i, result in enumerate(results):
        entry = _entry(result, i, keys, runtime_ms)
        for k in keys:
            entry[k] = spelling[k].setdefault(value_kind(entry[k]), entry[k])
        key = ",".join(str(entry[k]) for k in keys)
        if key in cache:
            same = all(value_kind(cache[key][k]) == value_kind(entry[k]) for k in keys)
            repeated += same
            clashes += not same
            continue
        cache[key] = entry
    values = {k: list(v.values()) for k, v in spelling.items()}
    tune_params = {k: sorted(v) if all(finite_number(x) is not None for x in v) else v for k, v in values.items()}
    warnings = ["a T4 results file records no tunable parameter values: each parameter's values are those its "
                "configurations record, numbers in ascending order"]
    if repeated:
        warnings.append(f"{repeated} results repeat a configuration recorded before: each configuration keeps its "
                        "first result")
    if clashes:
        warnings.append(f"{clashes} results configure values that print as an earlier result's do (1 and \"1\"), "
                        "which a Kernel Tuner cache key cannot tell apart: they are left out")
    layout = {"tune_params_keys": keys, "tune_params": tune_params, "objective": objective, "cache": cache}
    flag = data.get("objective_higher_is_better", metadata.get("objective_higher_is_better"))
    if flag is not None:  # not in the schema; kept where a file gives it (the loader checks it)
        layout["objective_higher_is_better"] = flag
    return layout, warnings


def _entry(result: Any, i: int, keys: list[str], runtime_ms: float) -> dict[str, Any]:
    """One T4 result as a cache entry (see :func:`as_cache_layout`)."""
    if not isinstance(result, dict) or not isinstance(result.get("configuration"), dict):
        raise T4Error(f"result {i} has no 'configuration' object")
    config = result["configuration"]
    if set(config) != set(keys):
        raise T4Error(f"result {i} configures {sorted(config)}, result 0 {sorted(keys)}: every result configures "
                      "the same parameters")
    entry: dict[str, Any] = {}
    for k in keys:
        v = config[k]
        if isinstance(v, (list, dict)):
            raise T4Error(f"result {i}: parameter '{k}' is {json.dumps(v)[:100]}: a parameter value is a number, "
                          "string, boolean or null")
        entry[k] = v
    for m in result.get("measurements") or ():
        if isinstance(m, dict) and isinstance(m.get("name"), str) and m["name"] not in entry:
            value = m.get("value")
            unit = str(m.get("unit") or "").strip().lower()
            if unit in _TO_MS and finite_number(value) is not None:  # a time, in ms as Kernel Tuner's caches record it
                value = value * _TO_MS[unit]
            entry[m["name"]] = value
    times = result.get("times") if isinstance(result.get("times"), dict) else {}
    for src, dst in _TIMES.items():
        if finite_number(times.get(src)) is not None and dst not in entry:
            entry[dst] = times[src] * runtime_ms
    runtimes = times.get("runtimes")
    if isinstance(runtimes, list) and runtimes:
        entry["times"] = [x * runtime_ms if finite_number(x) is not None else x for x in runtimes]
    invalidity = result.get("invalidity", "correct")
    if invalidity == "correct" and _judged_wrong(result.get("correctness", 1)):
        invalidity = "correctness"  # judged wrong, whatever the invalidity says
    if invalidity != "correct":
        entry["__error__"] = _FAILURES.get(invalidity, str(invalidity))
    if "timestamp" in result:
        entry["timestamp"] = result["timestamp"]
    return entry


def _judged_wrong(correctness: Any) -> bool:
    """Whether a result's ``correctness`` says its output was wrong: 0, false, or their text."""
    return correctness in (0, False) or str(correctness).strip().lower() in ("0", "0.0", "false")


def _factor(unit: Any, where: str) -> float:
    """Milliseconds per ``unit`` (``""`` and the misspelt ``miliseconds`` of some files: ms).

    Raises:
        T4Error: a unit that is not a time unit of :data:`_TO_MS`.
    """
    name = str(unit).strip().lower().replace("miliseconds", "milliseconds")
    if name in ("", "unitless"):
        return 1.0
    if name not in _TO_MS:
        raise T4Error(f"{where}: unit {unit!r} is not a time unit ({', '.join(_TO_MS)})")
    return _TO_MS[name]
