"""Kernel Tuner cache files: parse once, look configurations up in O(1), return evidence.

Format (Kernel Tuner's ``cachefile``, see ``shared/datasets/tuning-cache/README.md`` and
``kernel_tuner/util.py::process_cache`` / ``store_cache``)::

    {"device_name": str, "kernel_name": str, "problem_size": [int, ...],
     "tune_params_keys": [name, ...], "tune_params": {name: [value, ...]},
     "objective": "time",
     "cache": {"16,1,1,...": {<param>: value, ..., "time": 3.87, "times": [...], ...}, ...}}

- ``cache`` keys are the parameter values joined by ``,`` in ``tune_params_keys`` order,
  each formatted with Python's ``str`` (so ``1`` and ``1.0`` are different keys; lookups here
  canonicalise through the recorded values, so both find the entry).
- All times are in ms; ``nvml_energy`` is in J per kernel run; ``GFLOP/s`` and
  ``GFLOPS/W`` are derived rates.
- A failed configuration has a string where the objective should be
  (``"RuntimeFailedConfig"``, ``"CompilationFailedConfig"``, ``"InvalidConfig"``) or, from
  Kernel Tuner 1.4 on, an ``"__error__"`` field.
- Configurations excluded by the tuning run's restrictions are absent.
- Kernel Tuner appends entries while tuning, so a file may end with ``,`` and lack the closing
  ``}\\n}``; :func:`load_cache` repairs that (and drops a half-written last line).
- Older files lack header fields (e.g. no ``problem_size`` / ``objective``).
- A T4 results file (Kernel Tuner's ``store_output_file``) is read as the cache it records
  (:mod:`kernels.interchange.t4`).
- A file is searched on its header's ``objective`` where entries record it (Kernel Tuner's
  hyperparameter tuner writes ``"objective": "score"``, higher is better, and no ``time``),
  otherwise on ``time``: :attr:`TuningCache.searched`, :attr:`TuningCache.maximize`,
  :attr:`TuningCache.metric`.
"""

from __future__ import annotations

import functools
import gc
import gzip
import hashlib
import json
import math
import os
import re
import time
import types
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernels import stats
from kernels.evidence import Evidence
from kernels.interchange import t4
from kernels.interchange.values import finite_number, value_kind
from kernels.outcome import Outcome
from kernels.space import DesignSpace, Parameter, SpaceError, is_value, labelled_value

__all__ = [
    "LEGACY_FAILED_TIME",
    "NOT_RECORDED_LOG",
    "TuningCache",
    "TuningCacheError",
    "dataset_name",
    "higher_is_better",
    "load_cache",
    "metric_name",
    "recorded_field",
]

NOT_RECORDED_LOG = "configuration not in the recorded space (Kernel Tuner restrictions exclude it)"

# Kernel Tuner's failure markers (``kernel_tuner/util.py``: ErrorConfig subclasses).
_FAILURES: tuple[tuple[str, Outcome], ...] = (
    ("CompilationFailedConfig", Outcome.compile_error),
    ("RuntimeFailedConfig", Outcome.runtime_error),
    ("InvalidConfig", Outcome.invalid),
    ("ErrorConfig", Outcome.runtime_error),  # the base class: a failure of unknown kind
)
#: Caches of old Kernel Tuner versions record a failed configuration as this ``time`` (ms):
#: no real kernel takes 10^17 s, so any time at or above it is that marker.
LEGACY_FAILED_TIME = 1e20
#: Per-entry bookkeeping of the tuning run, not properties of the kernel: recorded field (ms)
#: -> our metric (ms).
COST_FIELDS = {
    "compile_time": "compile_ms",
    "verification_time": "verification_ms",
    "benchmark_time": "benchmark_ms",
    "framework_time": "framework_ms",
    "strategy_time": "strategy_ms",
}
# Recorded measurement -> our metric name (units in the name or in Evidence's docs).
_MEASURED = {
    "GFLOP/s": "gflops",
    "GFLOPS/W": "gflops_per_w",
    "nvml_energy": "energy_j",
    "nvml_power": "power_w",
    "temperature": "temperature_c",
    "core_freq": "core_freq_mhz",
    "mem_freq": "mem_freq_mhz",
}
# Our metric names accepted by :meth:`TuningCache.optimum` for recorded fields.
_METRIC_ALIASES = {"latency_ms": "time", "energy_j": "nvml_energy", "gflops": "GFLOP/s",
                   "power_w": "nvml_power", "gflops_per_w": "GFLOPS/W"}
#: Whether a higher value is better, for the objectives Kernel Tuner knows by name
#: (``objective_default_map`` in ``kernel_tuner/util.py``) and ``score``, the objective its
#: hyperparameter tuner maximises (``kernel_tuner/hyper.py``).
_HIGHER_IS_BETTER = {
    "time": False, "energy": False, "fitness": True, "cost": False, "loss": False, "score": True,
    "GFLOP/s": True, "TFLOP/s": True, "GB/s": True, "TB/s": True,
    "GFLOPS/W": True, "TFLOPS/W": True, "GFLOP/J": True, "TFLOP/J": True,
    "nvml_energy": False, "nvml_power": False,
}
# Our metric name -> the recorded field it reads (recorded_field).
_RECORDED_AS = {"latency_ms": "time", **{metric: name for name, metric in _MEASURED.items()}}
# Fields a cache entry (and a run's exported cache) records about itself: never an objective.
_RESERVED = frozenset({"candidate", "status", "timestamp", "times", "times_per_shape", "__error__"})
# Bookkeeping and operating conditions: recorded, reported as metrics, but not objectives.
_NOT_OBJECTIVES = frozenset(COST_FIELDS) | {"timestamp", "__error__", "temperature", "core_freq", "mem_freq"}


class TuningCacheError(ValueError):
    """A cache file cannot be read or is not a Kernel Tuner cache; the message says why."""


def dataset_name(path: str | os.PathLike[str]) -> str:
    """Data set name of a cache file: its file name without ``.json`` / ``.json.gz``.

    Example: ``.../gemm-clblast-xgemm_RTX-3090.json.gz`` -> ``'gemm-clblast-xgemm_RTX-3090'``.
    """
    name = Path(path).name
    for suffix in (".json.gz", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def higher_is_better(field_name: str) -> bool | None:
    """Whether a higher value of the recorded field ``field_name`` is better: Kernel Tuner's
    defaults for the objectives it knows by name (see :data:`_HIGHER_IS_BETTER`), True for
    other rates (a name with ``/s``, ``/W`` or ``/J``), None when the name does not say."""
    known = _HIGHER_IS_BETTER.get(field_name)
    if known is not None:
        return known
    if any(unit in field_name for unit in ("/s", "/W", "/J")):
        return True
    return None


def metric_name(field_name: str) -> str:
    """Our metric name for a recorded field: ``time`` -> ``latency_ms``, the recorded rates and
    energy by :data:`_MEASURED` (``GFLOP/s`` -> ``gflops``), any other field with each
    character that is not a letter, digit or ``_`` made ``_`` (``score`` stays ``score``)."""
    if field_name == "time":
        return "latency_ms"
    if field_name in _MEASURED:
        return _MEASURED[field_name]
    name = re.sub(r"[^A-Za-z0-9_]", "_", field_name) or "objective"
    return name if not name[0].isdigit() else f"m_{name}"


def recorded_field(metric: str) -> str:
    """The recorded field that our metric ``metric`` reads, as a Kernel Tuner cache names it:
    :func:`metric_name` undone for ``latency_ms`` (``time``) and the recorded rates and energy
    (``gflops`` -> ``GFLOP/s``); any other metric is its own field (``score``)."""
    return _RECORDED_AS.get(metric, metric)


def _searched_field(data: Mapping[str, Any], cache: Mapping[str, Any], keys: tuple[str, ...],
                   path: Path) -> tuple[str, bool, list[str]]:
    """The recorded field a replay of this file searches, whether higher is better, and warnings.

    The header's ``objective`` when an entry records it (a file of Kernel Tuner's
    hyperparameter tuner records only ``score``) or when no entry records a ``time``, in the
    header's ``objective_higher_is_better`` when that is a bool, else in the direction its
    name gives (:func:`higher_is_better`); otherwise ``time`` (minimised), with a warning when
    the header names another objective.

    Raises:
        TuningCacheError: ``objective_higher_is_better`` is not a bool, or true for ``time``;
            the objective's metric name is a tunable parameter's, an entry's own field's
            (:data:`_RESERVED`) or another recorded field's; or no entry records a ``time`` and
            the objective's direction is not known.
    """
    objective = str(data.get("objective") or "time")
    flag = data.get("objective_higher_is_better")
    if flag is not None and not isinstance(flag, bool):
        raise TuningCacheError(f"{path}: 'objective_higher_is_better' is {json.dumps(flag)[:40]}: give true or false")
    if objective == "time":
        if flag:
            raise TuningCacheError(f"{path}: the objective 'time' with 'objective_higher_is_better': true: a time "
                                   "is minimised")
        return "time", False, []
    # names that another field's metric, or an entry's own bookkeeping, already has
    taken = {*keys, *(metric_name(k) for k in keys), *_RESERVED, *COST_FIELDS.values(), "not_recorded",
             *(m for f, m in _MEASURED.items() if f != objective)}
    if objective in taken or metric_name(objective) in taken or metric_name(objective).startswith("latency_"):
        raise TuningCacheError(f"{path}: the objective {objective!r} (metric {metric_name(objective)!r}) is also the "
                               "name of a tunable parameter or of a field a cache entry records about itself "
                               f"({', '.join(sorted(_RESERVED))})")
    recorded = any(isinstance(rec, dict) and objective in rec for rec in cache.values())
    timed = any(isinstance(rec, dict) and "time" in rec for rec in cache.values())
    maximize = flag if flag is not None else higher_is_better(objective)
    if not recorded and timed:
        return "time", False, [f"no entry records the header's objective {objective!r}: searched on the recorded time"]
    if maximize is None:
        known = ", ".join(sorted(_HIGHER_IS_BETTER, key=str.lower))
        if timed:
            return "time", False, [f"the header's objective {objective!r} does not say whether higher is better "
                                   "(no 'objective_higher_is_better'): searched on the recorded time"]
        raise TuningCacheError(
            f"{path}: the entries record no 'time' and the objective {objective!r} does not say whether higher is "
            f"better: give 'objective_higher_is_better' in the header (known objectives: {known}; rates ending in "
            "/s, /W or /J are maximised)")
    return objective, maximize, []


def _legacy_failure(value: Any) -> float | None:
    """The value if it is Kernel Tuner's legacy failure time (at least :data:`LEGACY_FAILED_TIME`
    ms, as a number or a numeric string), else None."""
    if isinstance(value, bool):
        return None
    try:
        v = float(value)
    except OverflowError:  # an integer beyond any float: far above the marker, or far below 0
        return math.inf if value > 0 else None
    except (TypeError, ValueError):
        return None
    return v if v >= LEGACY_FAILED_TIME else None


def _classify(record: Mapping[str, Any], searched: str, measured: tuple[str, ...]) -> tuple[Outcome, str]:
    """The one place that maps a recorded entry to an :class:`Outcome` (and a reason).

    A failure is an ``__error__`` field, a string where a measurement belongs (``measured``:
    the objective, ``time`` and the recorded rates/energy, see :func:`_measured_fields`; Kernel
    Tuner writes its ``ErrorConfig`` there), no finite number in the ``searched`` field
    (:func:`_searched_field`), or, when that is ``time``, a negative one or one of at least
    :data:`LEGACY_FAILED_TIME` ms (the marker of old caches). The marker maps through
    :data:`_FAILURES`; an unknown or legacy one is a ``runtime_error``.
    """
    marker = record.get("__error__")
    where = "__error__"
    if marker is None:
        for key in measured:
            if isinstance(record.get(key), str):
                marker, where = record[key], key
                break
    if marker is not None:
        text = str(marker)
        for name, outcome in _FAILURES:
            if name in text:
                return outcome, f"recorded as {name}"
        legacy = _legacy_failure(text)
        if legacy is not None:
            return Outcome.runtime_error, (f"recorded as failed: {where} = {text!r} is the legacy failure "
                                           f"marker (at least {LEGACY_FAILED_TIME:g} ms; which failure is not recorded)")
        return Outcome.runtime_error, f"recorded error: {text}"
    v = record.get(searched)
    if (legacy := _legacy_failure(v)) is not None:
        return Outcome.runtime_error, (f"recorded as failed: {searched} = {legacy:g} is the legacy failure marker "
                                       f"(at least {LEGACY_FAILED_TIME:g}; which failure is not recorded)")
    if searched != "time":
        if finite_number(v) is None:
            return Outcome.runtime_error, f"recorded entry has no usable {searched} ({v!r:.40})"
        return Outcome.ok, "recorded measurement"
    if finite_number(v) is None or v < 0:
        return Outcome.runtime_error, f"recorded entry has no usable time ({v!r:.40})"
    return Outcome.ok, "recorded measurement"


def _measured_fields(objective: str) -> tuple[str, ...]:
    """The fields of an entry where a measurement belongs: ``objective``, ``time``, then
    :data:`_MEASURED`'s, once each."""
    return tuple(dict.fromkeys((objective, "time", *_MEASURED)))


def _code(codes: Mapping[tuple[str, Any], int], v: Any) -> Any:
    """Position of the entry value ``v`` among its parameter's recorded values; ``v`` itself
    when it is not a recorded value, so that the entry lies outside the space, as such an entry
    of a numeric parameter does."""
    try:
        return codes.get(value_kind(v), v)
    except TypeError:  # unhashable
        return v


_CACHE_OPEN = re.compile(r'"cache"\s*:\s*\{')


def _line_of(text: str, pos: int) -> int:
    """1-based line number of character ``pos`` of ``text``."""
    return text.count("\n", 0, pos) + 1


def _parse(text: str, path: Path) -> tuple[dict[str, Any], list[str]]:
    """JSON of a cache file, repairing an unterminated one. Returns (data, repair notes).

    Kernel Tuner's ``store_cache`` appends each entry as one line ``\\n"<key>": {...},`` and
    leaves the file open, so an interrupted run ends with ``,`` (closed here) or inside its
    last line (that entry is dropped, and the note names its key and line). Anything else
    that is not JSON is refused: only the last line can have been cut off.

    Raises:
        TuningCacheError: not JSON and not an unterminated cache file; the message gives the
            line of the first entry that cannot be read when it is not the last line.
    """
    try:
        return json.loads(text), []
    except json.JSONDecodeError as exc:
        error = exc
    opening = _CACHE_OPEN.search(text)
    if opening is None:
        raise TuningCacheError(f"{path}: not valid JSON and not a repairable cache file: {error}")
    try:  # the header is everything before the cache object (Kernel Tuner writes it first)
        data = json.loads(text[: opening.start()] + '"cache": {}}')
    except json.JSONDecodeError:
        raise TuningCacheError(f"{path}: not valid JSON and not a repairable cache file: {error}") from None
    decoder = json.JSONDecoder()
    cache: dict[str, Any] = {}
    notes: list[str] = []
    pos, end = opening.end(), len(text)
    closed = False
    while True:
        while pos < end and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= end:
            break
        if text[pos] == "}":  # the cache object is closed; what follows must close the file
            closed = True
            tail = text[pos + 1:].strip()
            if tail not in ("", "}"):
                raise TuningCacheError(f"{path}: line {_line_of(text, pos)}: unexpected text after the cache object")
            break
        start = pos
        key: Any = None
        try:
            key, pos = decoder.raw_decode(text, pos)
            while pos < end and text[pos] in " \t\r\n":
                pos += 1
            if not isinstance(key, str) or pos >= end or text[pos] != ":":
                raise ValueError("expected '\"<key>\": {...}'")
            pos += 1
            while pos < end and text[pos] in " \t\r\n":
                pos += 1
            value, pos = decoder.raw_decode(text, pos)
            if not isinstance(value, dict):
                raise ValueError("an entry must be an object")
        except ValueError as exc:
            line = _line_of(text, start)
            if "\n" in text[start:].rstrip():  # not the last line: the file is broken, not cut off
                raise TuningCacheError(f"{path}: line {line}: cache entry cannot be read ({exc}); "
                                       "only the last line of an interrupted run may be incomplete") from None
            name = f"'{key}'" if isinstance(key, str) else "(key unreadable)"
            notes.append(f"dropped the half-written last entry {name} at line {line} "
                         f"({end - start} chars cut off while Kernel Tuner was writing it)")
            break
        cache[key] = value
    if not closed:
        notes.insert(0, "appended the missing closing '}\\n}' (the file was written append-only and not "
                     "closed: an interrupted or partial run)")
    data["cache"] = cache
    return data, notes


@dataclass(frozen=True, eq=False)  # identity: comparing 18k entries is never wanted
class TuningCache:
    """One Kernel Tuner cache file, parsed and indexed. Do not modify its mappings.

    Attributes:
        name: data set name (file name without ``.json`` / ``.json.gz``).
        path: the file it was read from.
        sha256: hex digest of the decompressed file content, as stored (before repair).
        device_name: GPU it was measured on, e.g. ``"NVIDIA A100-PCIE-40GB"``
            (``"unknown"`` when the header lacks it).
        kernel_name: tuned kernel, e.g. ``"Xgemm"`` (``""`` when absent).
        problem_size: problem dimensions, or None when the header lacks them (or records none).
        tune_params_keys: parameter names in key order.
        tune_params: name -> recorded values (tuple, the file's order).
        objective: the run's objective field (``"time"`` when absent).
        searched: the recorded field a replay searches: ``"time"``, or the header's objective
            where entries record it or record no time (e.g. ``"score"``; :func:`_searched_field`).
        maximize: whether a higher value of ``searched`` is better (False for time).
        outside: keys of the entries that record a value their parameter's ``tune_params``
            lacks: outside the search space, so no search proposes them.
        objectives_available: numeric fields recorded on valid entries, ``"time"`` first
            (e.g. ``time``, ``GFLOP/s``, ``nvml_energy``); run bookkeeping
            (``compile_time`` ...) excluded.
        entries: canonical key -> recorded entry (read-only mappings).
        repaired: what :func:`load_cache` repaired (``"; "``-joined), or ``""``.
        warnings: what the user should know before trusting the file, one sentence each:
            the repairs (a dropped half-written entry names its key and line), header
            fields an older layout lacks and what was assumed instead, entry fields
            (``times``, ``compile_time`` ...) some entries lack, and failures read from the
            legacy ``time`` marker. Each names the field.
        load_ms: wall-clock time of reading, decompressing, parsing and indexing (ms).
    """

    name: str
    path: Path
    sha256: str
    device_name: str
    kernel_name: str
    problem_size: tuple[int, ...] | None
    tune_params_keys: tuple[str, ...]
    tune_params: Mapping[str, tuple[Any, ...]]
    objective: str
    objectives_available: tuple[str, ...]
    entries: Mapping[str, Mapping[str, Any]]
    searched: str = "time"
    maximize: bool = False
    outside: frozenset[str] = frozenset()
    repaired: str = ""
    warnings: tuple[str, ...] = ()
    load_ms: float = 0.0
    _status: Mapping[str, tuple[Outcome, str]] = field(default_factory=dict, repr=False, compare=False)
    _formats: tuple[Mapping[Any, str], ...] = field(default=(), repr=False, compare=False)
    _codes: Mapping[str, Mapping[tuple[str, Any], int]] = field(default_factory=dict, repr=False, compare=False)
    _summaries: dict[str, dict[str, float]] = field(default_factory=dict, repr=False, compare=False)

    # -- counts ----------------------------------------------------------------------------

    @property
    def size(self) -> int:
        """Number of recorded entries (valid plus failed)."""
        return len(self.entries)

    @property
    def metric(self) -> str:
        """Our metric name for :attr:`searched` (``latency_ms`` for time; see :func:`metric_name`)."""
        return metric_name(self.searched)

    @property
    def valid_count(self) -> int:
        """Entries with a usable measurement (outcome ``ok``)."""
        return sum(1 for s, _ in self._status.values() if s is Outcome.ok)

    @property
    def failed_count(self) -> int:
        """Entries recorded as failed (compile, runtime or invalid)."""
        return self.size - self.valid_count

    def failures(self) -> dict[str, int]:
        """Count of failed entries per outcome, e.g. ``{"runtime_error": 155, "compile_error": 6}``."""
        out: dict[str, int] = {}
        for status, _ in self._status.values():
            if status is not Outcome.ok:
                out[str(status)] = out.get(str(status), 0) + 1
        return out

    @property
    def sample_label(self) -> str:
        """Label of the recorded samples, e.g. ``"problem_size=4096x4096"`` (``"recorded"``
        when the file has no problem size)."""
        if self.problem_size:
            return "problem_size=" + "x".join(str(v) for v in self.problem_size)
        return "recorded"

    # -- space -----------------------------------------------------------------------------

    @property
    def labels(self) -> dict[str, tuple[Any, ...]]:
        """Parameters with a recorded value that is not a finite number (a string such as
        ``"best1bin"``, a boolean or null) -> their recorded values, in the file's order.

        The design space (:meth:`space`) numbers such a parameter's values 0, 1, ... in this
        order, as categories: the search's models and steps work on numbers, and the order of
        the file is the only order such values have.
        """
        return {k: self.tune_params[k] for k in self.tune_params_keys if k in self._codes}

    def space(self) -> DesignSpace:
        """The Cartesian design space of ``tune_params`` (no restriction expressions); a
        parameter of :attr:`labels` takes its values' positions 0 .. n - 1, labelled with them.

        Points of this space that the file does not record are reported by :meth:`lookup`
        as ``invalid`` with ``not_recorded``; no attempt is made to infer Kernel Tuner's
        restriction expressions.

        Raises:
            SpaceError: a recorded parameter name is not a C identifier, or a parameter records
                a value twice.
        """
        for k, codes in self._codes.items():
            if len(codes) < len(self.tune_params[k]):
                counts = Counter(map(value_kind, self.tune_params[k]))
                twice = list(dict.fromkeys(v for v in self.tune_params[k] if counts[value_kind(v)] > 1))
                raise SpaceError(f"parameter '{k}': duplicate values {twice}")
        return DesignSpace(tuple(
            Parameter(k, tuple(range(len(self.tune_params[k]))), self.tune_params[k]) if k in self._codes
            else Parameter(k, tuple(self.tune_params[k])) for k in self.tune_params_keys))

    def cartesian_size(self) -> int:
        """Number of points of the Cartesian product of ``tune_params``."""
        return math.prod(len(v) for v in self.tune_params.values())

    # -- lookup ----------------------------------------------------------------------------

    def key(self, params: Mapping[str, Any]) -> str:
        """Kernel Tuner's cache key of ``params`` (values formatted as recorded, so ``16.0``
        for an int parameter gives ``"16"``).

        Raises:
            KeyError: a parameter is missing or unknown, or a value is not a recorded value;
                the message names the parameter (and lists the allowed values).
        """
        unknown = sorted(set(params) - set(self.tune_params_keys))
        if unknown:
            raise KeyError(f"unknown parameter(s) {', '.join(unknown)} (recorded: {', '.join(self.tune_params_keys)})")
        parts = []
        for name, formats in zip(self.tune_params_keys, self._formats):
            if name not in params:
                raise KeyError(f"missing parameter '{name}'")
            v = params[name]
            try:
                text = formats.get(value_kind(v))
            except TypeError:  # unhashable value
                text = None
            if text is None:
                raise KeyError(f"parameter '{name}' = {v!r} is not one of the recorded values {list(self.tune_params[name])}")
            parts.append(text)
        return ",".join(parts)

    def params_of(self, key: str) -> dict[str, Any]:
        """Recorded parameter values of the entry ``key``, in ``tune_params_keys`` order."""
        rec = self.entries[key]
        return {k: rec[k] for k in self.tune_params_keys}

    def point_of(self, key: str) -> dict[str, Any]:
        """The entry ``key`` as a point of :meth:`space` (:meth:`space_point` of :meth:`params_of`)."""
        params = self.params_of(key)
        return self.space_point(params) if self._codes else params

    def space_point(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Recorded values as a point of :meth:`space`: each value of a :attr:`labels` parameter
        replaced by its position (a value that is not recorded is left as it is, outside the
        space); the inverse of :meth:`recorded_params`."""
        return {k: _code(self._codes[k], v) if k in self._codes else v for k, v in params.items()}

    def recorded_params(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """A point of :meth:`space` with the recorded values: a :attr:`labels` parameter's
        position (an int, not a bool, in range) becomes its recorded value; every other
        value, and a parameter the file does not have, is passed on as given (for
        :meth:`key` to accept or name)."""
        out = dict(point)
        for k in self._codes:
            if k in out:
                out[k] = labelled_value(self.tune_params[k], out[k])
        return out

    def status(self, key: str) -> tuple[Outcome, str]:
        """(outcome, reason) of the recorded entry ``key``."""
        return self._status[key]

    def lookup(self, params: Mapping[str, Any]) -> Evidence:
        """The recorded evidence of one configuration (a dict lookup; nothing is run).

        Args:
            params: parameter name -> recorded value, one per ``tune_params_keys`` entry (a
                point of :meth:`space` goes through :meth:`recorded_params` first, as the
                replay backend does).

        Returns:
            :class:`~kernels.evidence.Evidence` with

            - ``ok``: metrics ``latency_ms`` (the recorded ``time``, Kernel Tuner's mean of
              the per-iteration ``times``, ms), ``latency_median_ms``, ``latency_iqr_ms``,
              ``latency_ci_low_ms``/``latency_ci_high_ms`` (95% bootstrap CI of the median
              of ``times``, ms), ``latency_ms[<label>]``, ``gflops`` (GFLOP/s) and
              ``gflops_per_w`` when recorded, ``energy_j`` (``nvml_energy``, J per kernel
              run) and ``power_w`` (``nvml_power`` if recorded, else ``energy_j`` divided
              by the time, W), ``temperature_c``, ``core_freq_mhz``, ``mem_freq_mhz`` when
              recorded; ``samples_ms = {label: times}``;
            - a valid entry of a file searched on another field (:attr:`searched`, e.g.
              ``score``): ``ok`` with that value as :attr:`metric`, and the above where the
              entry records a time (else the recorded rates and energy only);
            - a recorded failure: ``compile_error`` / ``runtime_error`` / ``invalid``
              according to Kernel Tuner's marker;
            - a configuration with recorded values that the file lacks: ``invalid``, log
              :data:`NOT_RECORDED_LOG`, metric ``not_recorded = True``;
            - a missing/unknown parameter or a value outside ``tune_params``: ``invalid``
              with a log naming the parameter.

            Every outcome also carries the recorded tuning costs ``compile_ms``,
            ``verification_ms``, ``benchmark_ms``, ``framework_ms``, ``strategy_ms`` (ms)
            when the entry records them. ``fingerprint`` = backend, data set, device,
            kernel, problem size and the file's sha256.
        """
        start = time.perf_counter()
        fingerprint = self.fingerprint()

        def evidence(status: Outcome, reason: str, **kw: Any) -> Evidence:
            log = f"== replay ==\n{self.name} ({self.device_name}, kernel {self.kernel_name or '?'})\n== verdict ==\n{status}: {reason}"
            return Evidence(status=status, log=log, fingerprint=fingerprint,
                            duration_s=time.perf_counter() - start, **kw)

        if not isinstance(params, Mapping):
            return evidence(Outcome.invalid, f"bad parameters: expected a mapping, got {type(params).__name__}")
        try:
            key = self.key(params)
        except KeyError as exc:
            return evidence(Outcome.invalid, f"bad parameters: {exc.args[0]}")
        rec = self.entries.get(key)
        # Kernel Tuner's key is the values' text, which "1" and 1, or a value with a comma,
        # share with others: an entry counts only when it records the values asked for.
        if rec is not None and any(value_kind(rec.get(k)) != value_kind(params[k]) for k in self.tune_params_keys):
            rec = None
        if rec is None:
            reason = NOT_RECORDED_LOG
            if self.repaired:
                reason += "; this file is a partial (unterminated) run, so it may simply not have been measured"
            return evidence(Outcome.invalid, reason, metrics={"not_recorded": True})
        status, reason = self._status[key]
        metrics: dict[str, Any] = {}
        for src, dst in COST_FIELDS.items():
            v = finite_number(rec.get(src))
            if v is not None:
                metrics[dst] = v
        if status is not Outcome.ok:
            return evidence(status, reason, metrics=metrics)
        if metrics.get("verification_ms", 0.0) > 0:
            reason += " (outputs verified by Kernel Tuner when recorded)"
        else:
            reason += " (no output verification recorded)"
        if self.searched != "time":
            metrics[self.metric] = float(rec[self.searched])
        t = finite_number(rec.get("time"))
        if t is None or t < 0 or t >= LEGACY_FAILED_TIME:  # a file of another objective (a score)
            for src, dst in _MEASURED.items():
                if (v := finite_number(rec.get(src))) is not None:
                    metrics.setdefault(dst, v)
            return evidence(Outcome.ok, reason, metrics=metrics)
        label = self.sample_label
        metrics["latency_ms"] = t
        metrics[f"latency_ms[{label}]"] = t
        samples: dict[str, list[float]] = {}
        times = [float(x) for x in rec.get("times") or () if finite_number(x) is not None]
        if times:
            summ = self._summaries.get(key)
            if summ is None:
                summ = self._summaries[key] = stats.summarize(times)
            metrics["latency_median_ms"] = summ["median"]
            metrics["latency_iqr_ms"] = summ["iqr"]
            metrics["latency_ci_low_ms"] = summ["ci_low"]
            metrics["latency_ci_high_ms"] = summ["ci_high"]
            samples[label] = times
        for src, dst in _MEASURED.items():
            v = finite_number(rec.get(src))
            if v is not None:
                metrics[dst] = v
        if "power_w" not in metrics and "energy_j" in metrics and t > 0:
            metrics["power_w"] = metrics["energy_j"] / (t * 1e-3)
        return evidence(Outcome.ok, reason, metrics=metrics, samples_ms=samples)

    def optimum(self, metric: str | None = None, *, maximize: bool | None = None) -> tuple[dict[str, Any], float]:
        """Best valid recorded configuration for one recorded field.

        Args:
            metric: a recorded field (``"time"``, ``"nvml_energy"``, ``"GFLOP/s"`` ...) or
                our metric name (``"latency_ms"``, ``"energy_j"``, ``"gflops"``); default
                :attr:`searched`.
            maximize: direction; default :attr:`maximize` for :attr:`searched`, else
                :func:`higher_is_better` of the field (minimised when its name does not say).

        Returns:
            (parameters of the best entry, its recorded value).

        Raises:
            KeyError: no valid entry records ``metric`` (lists what is recorded).
        """
        field_name = self.searched if metric is None else _METRIC_ALIASES.get(metric, metric)
        if maximize is None:
            maximize = self.maximize if field_name == self.searched else bool(higher_is_better(field_name))
        best_key, best = None, None
        for key, (status, _) in self._status.items():
            if status is not Outcome.ok:
                continue
            v = finite_number(self.entries[key].get(field_name))
            if v is None:
                continue
            if best is None or (v > best if maximize else v < best):
                best_key, best = key, v
        if best_key is None:
            numeric = sorted({f for rec in self.entries.values() for f, v in rec.items()
                              if f not in self.tune_params_keys and f not in _NOT_OBJECTIVES and finite_number(v) is not None})
            raise KeyError(f"no valid entry of '{self.name}' records '{field_name}' (numbers recorded: "
                           f"{', '.join(numeric) or 'none'}; valid entries record: {', '.join(self.objectives_available) or 'nothing'})")
        return self.params_of(best_key), best

    def fingerprint(self) -> dict[str, Any]:
        """What identifies the recorded environment: backend, data set, device, kernel,
        problem size, objective and the sha256 of the file's (decompressed) content."""
        return {
            "backend": "replay",
            "format": "kernel_tuner_cache",
            "dataset": self.name,
            "device_name": self.device_name,
            "kernel_name": self.kernel_name,
            "problem_size": list(self.problem_size) if self.problem_size else None,
            "objective": self.objective,
            "sha256": self.sha256,
        }


def load_cache(path: str | os.PathLike[str]) -> TuningCache:
    """Read a Kernel Tuner cache file (``.json`` or gzip ``.json.gz``), parsed once per
    process and content version (memoised on path, mtime and size).

    Args:
        path: the cache file; gzip is detected from its magic bytes, not its name.

    Returns:
        The parsed, indexed :class:`TuningCache`.

    Raises:
        FileNotFoundError: no such file.
        TuningCacheError: not gzip/JSON, unrepairable, a T4 results file that cannot be read
            (:func:`kernels.interchange.t4.as_cache_layout`), missing ``cache`` /
            ``tune_params_keys`` and ``tune_params``, a header field of the wrong shape, or an
            entry that lacks a parameter or records one as a list or object (the message names
            the field, the entry's key and the parameter).
    """
    return load_resolved(Path(path).expanduser().resolve())


def load_resolved(path: Path) -> TuningCache:
    """:func:`load_cache` of a path that is already absolute and resolved (no symlinks):
    one ``stat`` checks that the memoised parse is current."""
    st = path.stat()
    return _load(path, st.st_mtime_ns, st.st_size)


def _canonical(rec: Mapping[str, Any], keys: tuple[str, ...], formats: tuple[Mapping[Any, str], ...], fallback: str) -> str:
    """Key of an entry rebuilt from its own values, formatted as the recorded ``tune_params``."""
    try:
        return ",".join(f[value_kind(rec[k])] for k, f in zip(keys, formats))
    except (KeyError, TypeError):
        return fallback


def _keys_match(cache: Mapping[str, Any], keys: tuple[str, ...], formats: tuple[Mapping[Any, str], ...]) -> bool:
    """True if the file's keys are already canonical (checked on a few entries); Kernel
    Tuner writes them from the same values, so re-keying every entry is normally wasted."""
    for n, (file_key, rec) in enumerate(cache.items()):
        if n >= 8:
            break
        if isinstance(rec, dict) and _canonical(rec, keys, formats, file_key) != file_key:
            return False
    return True


# Header fields of Kernel Tuner's layout that older files lack -> what is assumed then.
_HEADER_DEFAULTS = {
    "device_name": "the device is reported as 'unknown'",
    "kernel_name": "the kernel is unnamed (the goal's workload is the data set name)",
    "problem_size": "samples are labelled 'recorded' (no problem size)",
    "objective": "the objective is taken to be 'time'",
    "tune_params": "parameter values are inferred from the entries, in first-seen order",
    "tune_params_keys": "the parameter order is that of 'tune_params'",
}
# Entry fields of Kernel Tuner's layout -> what their absence costs.
_ENTRY_FIELDS = {
    "times": "no per-iteration samples: no median, IQR or confidence interval for them",
    "compile_time": "no recorded compile cost",
    "verification_time": "no record of output verification",
    "benchmark_time": "no recorded benchmark cost",
    "timestamp": "no record of when they were measured",
}


def _header_warnings(data: Mapping[str, Any]) -> list[str]:
    """One warning per header field of Kernel Tuner's layout that ``data`` lacks."""
    return [f"header lacks '{name}': {consequence}" for name, consequence in _HEADER_DEFAULTS.items()
            if data.get(name) in (None, "", [], {})]


def _entry_warnings(entries: Mapping[str, Mapping[str, Any]], status: Mapping[str, tuple[Outcome, str]],
                    searched: str) -> list[str]:
    """Warnings for entry fields some recorded entries lack (``times`` only counted on
    valid entries, a failure has none, and only when ``searched`` is the time: the samples
    are of the time), and for failures read from the legacy marker."""
    missing = dict.fromkeys((f for f in _ENTRY_FIELDS if searched == "time" or f != "times"), 0)
    valid = legacy = 0
    for key, rec in entries.items():
        ok = status[key][0] is Outcome.ok
        valid += ok
        legacy += "legacy failure marker" in status[key][1]
        for name in missing:
            if name not in rec and (ok or name != "times"):
                missing[name] += 1
    out = []
    for name, n in missing.items():
        of = valid if name == "times" else len(entries)
        if n:
            out.append(f"{n} of {of} {'valid ' if name == 'times' else ''}entries lack '{name}': {_ENTRY_FIELDS[name]}")
    if legacy:
        out.append(f"{legacy} entries record the legacy failure marker (a measurement of at least "
                   f"{LEGACY_FAILED_TIME:g}): imported as failed (runtime_error), not as measurements")
    return out


def _outside(entries: Mapping[str, Mapping[str, Any]], keys: tuple[str, ...],
             params: Mapping[str, tuple[Any, ...]]) -> dict[str, str]:
    """Entries that record a value their parameter's ``tune_params`` lacks, key -> that
    parameter: such an entry lies outside the search space (Kernel Tuner's too)."""
    allowed = [{value_kind(v) for v in params[k]} for k in keys]
    try:  # the usual case at C speed: every distinct value of every parameter is allowed
        if all(all(value_kind(v) in kinds for _, v in {(type(rec[k]), rec[k]) for rec in entries.values()})
               for k, kinds in zip(keys, allowed)):
            return {}
    except TypeError:  # an unhashable value: found below
        pass
    out = {}
    for key, rec in entries.items():
        for k, kinds in zip(keys, allowed):
            try:
                inside = value_kind(rec[k]) in kinds
            except TypeError:  # unhashable
                inside = False
            if not inside:
                out[key] = k
                break
    return out


def _outside_warnings(entries: Mapping[str, Mapping[str, Any]], outside: Mapping[str, str]) -> list[str]:
    """A warning when entries lie outside the search space (:func:`_outside`): no search proposes them."""
    if not outside:
        return []
    key, name = next(iter(outside.items()))
    return [f"{len(outside)} entries record a value that 'tune_params' lacks (first: entry '{key}', {name} = "
            f"{json.dumps(entries[key][name])[:60]}): they lie outside the search space, and no search proposes them"]


#: The types a recorded parameter value may have (JSON scalars: hashable, so they can be looked up).
_SCALARS = frozenset({int, float, str, bool, type(None)})


def _header_params(data: Mapping[str, Any], path: Path) -> tuple[tuple[str, ...], dict[str, list[Any]]]:
    """``(tune_params_keys, tune_params)`` of a header, checked: the names are a list of distinct
    strings (default: the keys of ``tune_params``), ``tune_params`` an object whose values are
    lists of JSON scalars (a parameter it lacks is inferred from the entries).

    Raises:
        TuningCacheError: neither field, or one of the wrong shape; the message names the field
            (and the parameter).
    """
    tune_params = data.get("tune_params")
    if tune_params is None:
        tune_params = {}
    elif not isinstance(tune_params, dict):
        raise TuningCacheError(f"{path}: 'tune_params' must be an object (parameter name -> list of values), "
                               f"not {type(tune_params).__name__}")
    keys = data.get("tune_params_keys")
    if keys is None or keys == []:
        keys = list(tune_params)
    if not isinstance(keys, list) or not all(isinstance(k, str) and k for k in keys):
        shown = type(keys).__name__ if not isinstance(keys, list) else json.dumps(keys)[:200]
        raise TuningCacheError(f"{path}: 'tune_params_keys' must be a list of parameter names, not {shown}")
    if not keys:
        raise TuningCacheError(f"{path}: header lacks 'tune_params_keys' and 'tune_params'")
    twice = next((k for n, k in enumerate(keys) if k in keys[:n]), None)
    if twice is not None:
        raise TuningCacheError(f"{path}: 'tune_params_keys' names '{twice}' twice")
    for k in keys:
        values = tune_params.get(k)
        if values is None:
            continue
        if not isinstance(values, list):
            raise TuningCacheError(f"{path}: 'tune_params' of '{k}' must be a list of values, not {type(values).__name__}")
        bad = next((v for v in values if type(v) not in _SCALARS), None)
        if bad is not None:
            raise TuningCacheError(f"{path}: 'tune_params' of '{k}' has the value {json.dumps(bad)[:100]}: "
                                   "a parameter value is a number, string, boolean or null")
    return tuple(keys), tune_params


def _check_entries(cache: Mapping[str, Any], keys: tuple[str, ...], path: Path) -> None:
    """Refuse an entry that lacks a parameter of ``keys`` or records a value that is not a JSON
    scalar (a list or an object cannot be looked up); one pass of C-level checks per entry.

    Raises:
        TuningCacheError: names the entry's key and the parameter.
    """
    for file_key, rec in cache.items():
        if not isinstance(rec, dict):
            continue
        try:
            if _SCALARS.issuperset(map(type, map(rec.__getitem__, keys))):
                continue
        except KeyError as exc:
            raise TuningCacheError(f"{path}: entry '{file_key}' lacks parameter '{exc.args[0]}' (an entry records "
                                   "every parameter of 'tune_params_keys')") from None
        name = next(k for k in keys if type(rec[k]) not in _SCALARS)
        raise TuningCacheError(f"{path}: entry '{file_key}': parameter '{name}' is {json.dumps(rec[name])[:100]}: "
                               "a parameter value is a number, string, boolean or null")


@functools.lru_cache(maxsize=64)
def _load(path: Path, mtime_ns: int, size: int) -> TuningCache:  # noqa: ARG001 - cache key
    start = time.perf_counter()
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise TuningCacheError(f"{path}: broken gzip data: {exc}") from None
    digest = hashlib.sha256(raw).hexdigest()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise TuningCacheError(f"{path}: not UTF-8 text: {exc}") from None
    gc_was_enabled = gc.isenabled()
    gc.disable()  # parsing creates ~10^6 objects and no cycles; collections would only slow it
    try:
        data, repairs = _parse(text, path)
    finally:
        if gc_was_enabled:
            gc.enable()
    converted: list[str] = []
    if t4.is_t4(data):
        try:
            data, converted = t4.as_cache_layout(data)
        except t4.T4Error as exc:
            raise TuningCacheError(f"{path}: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("cache"), dict):
        raise TuningCacheError(f"{path}: not a Kernel Tuner cache file (no 'cache' object) nor a T4 results file "
                               "(no 'results' list)")
    cache: dict[str, Any] = data["cache"]
    warned = list(repairs) + _header_warnings(data) + converted
    keys, tune_params = _header_params(data, path)
    _check_entries(cache, keys, path)
    params: dict[str, tuple[Any, ...]] = {}
    for k in keys:
        values = tune_params.get(k)
        if values is None:  # infer from the entries, in first-seen order
            values = list(dict.fromkeys(rec[k] for rec in cache.values() if isinstance(rec, dict)))
        params[k] = tuple(values)
    formats = tuple({value_kind(v): str(v) for v in params[k]} for k in keys)
    codes = {k: types.MappingProxyType({value_kind(v): i for i, v in reversed(list(enumerate(params[k])))})
             for k in keys if not all(map(is_value, params[k]))}
    objective = str(data.get("objective") or "time")
    measured = _measured_fields(objective)
    searched, maximize, searched_notes = _searched_field(data, cache, keys, path)

    rekey = not _keys_match(cache, keys, formats)
    entries: dict[str, types.MappingProxyType] = {}
    status: dict[str, tuple[Outcome, str]] = {}
    fields: set[str] = set()
    for file_key, rec in cache.items():
        if not isinstance(rec, dict):
            continue
        key = _canonical(rec, keys, formats, file_key) if rekey else file_key
        entries[key] = types.MappingProxyType(rec)
        status[key] = verdict = _classify(rec, searched, measured)
        if verdict[0] is Outcome.ok:
            fields.update(rec.keys())
    if searched != "time" and (lacking := sum(searched not in rec and "__error__" not in rec for rec in entries.values())):
        searched_notes.append(f"{lacking} of {len(entries)} entries record no '{searched}', the objective searched: "
                              "they count as failed")
    numeric = []
    for f in sorted(fields - set(keys) - _NOT_OBJECTIVES):
        sample = next((e[f] for k, e in entries.items() if status[k][0] is Outcome.ok and f in e), None)
        if finite_number(sample) is not None:
            numeric.append(f)
    numeric.sort(key=lambda f: (f != "time", f))
    outside = _outside(entries, keys, params)
    problem_size = data.get("problem_size")
    if isinstance(problem_size, (int, float)) and not isinstance(problem_size, bool):
        problem_size = [problem_size]
    return TuningCache(
        name=dataset_name(path),
        path=path,
        sha256=digest,
        device_name=str(data.get("device_name") or "unknown"),
        kernel_name=str(data.get("kernel_name") or ""),
        problem_size=tuple(problem_size) if isinstance(problem_size, list) and problem_size else None,
        tune_params_keys=keys,
        tune_params=types.MappingProxyType(params),
        objective=objective,
        objectives_available=tuple(numeric),
        searched=searched,
        maximize=maximize,
        outside=frozenset(outside),
        entries=types.MappingProxyType(entries),
        repaired="; ".join(repairs),
        warnings=tuple(warned + searched_notes + _entry_warnings(entries, status, searched)
                       + _outside_warnings(entries, outside)),
        load_ms=(time.perf_counter() - start) * 1e3,
        _status=types.MappingProxyType(status),
        _formats=formats,
        _codes=types.MappingProxyType(codes),
    )
