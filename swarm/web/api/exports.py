"""A run's candidates as CSV, JSON and a Kernel Tuner cache file.

The Kernel Tuner cache follows ``kernel_tuner/util.py::store_cache`` (and reads back with
:func:`kernels.interchange.tuning_cache.load_cache`): ``tune_params_keys`` in the design space's order,
``tune_params`` the values, and ``cache`` keyed by the values joined with ``,``. An ``ok``
candidate's entry has ``time`` (ms, the goal's ``latency_ms``: the sum over the shape set of
per-shape medians) and ``times``: the raw samples when one shape is timed, otherwise the
per-repetition sums of the per-shape samples (truncated to the shortest series); each shape's
own samples are in ``times_per_shape``. A failure has Kernel Tuner's marker in ``time``:
``CompilationFailedConfig`` (compile_error), ``InvalidConfig`` (invalid) or
``RuntimeFailedConfig`` (runtime_error, timeout, wrong_result; the status is in ``status``).
A goal whose primary objective is another metric (a replay goal of recorded scores) has it as
the file's ``objective`` under its recorded name (``score``; ``gflops`` is ``GFLOP/s``), with
``objective_higher_is_better``, in every entry (the failure marker too), so the file reads back
on that objective; every other objective is in each ``ok`` entry too (``energy_j`` as
``nvml_energy``).
Every entry keeps Kernel Tuner's bookkeeping times (``compile_time`` ... in ms) where the
evaluation has them: a replay's as the file recorded them, a compiled candidate's compile time.
A run on a recorded file names the file's device, kernel and problem size (as the file reads
now), so that the export reads back as the file does.
Pending candidates, candidates with their own source (not the template) and unjudged ones
(``invalid_input``: the workload's inputs failed, which says nothing about the configuration)
are left out of the cache.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from kernels.interchange.tuning_cache import COST_FIELDS, TuningCache, TuningCacheError, recorded_field
from kernels.space import labelled_params
from swarm.models import PENDING_STATUSES, UNJUDGED_STATUSES, Candidate, Run
from swarm.runs.progress import run_state

FAILURE_MARKERS = {
    "compile_error": "CompilationFailedConfig",
    "invalid": "InvalidConfig",
    "runtime_error": "RuntimeFailedConfig",
    "timeout": "RuntimeFailedConfig",
    "wrong_result": "RuntimeFailedConfig",
}
CHUNK = 2000


def _rows(run: Run):
    return (run.candidates.order_by("id")
            .values_list("id", "generation", "agent", "status", "content_hash", "params", "evaluated_at",
                         "evidence__metrics", "reused_from_id")
            .iterator(chunk_size=CHUNK))


def _columns(run: Run) -> tuple[list[str], list[str]]:
    params = [p["name"] for p in run.space.get("parameters", [])]
    metrics: list[str] = []
    sample = (run.candidates.filter(status="ok", evidence__isnull=False).order_by("-id")
              .values_list("evidence__metrics", flat=True).first()) or {}
    metrics = [k for k in sample if "[" not in k]
    for o in run.goal.objectives:
        if o["metric"] not in metrics:
            metrics.insert(0, o["metric"])
    return params, metrics


def csv_lines(run: Run) -> Iterator[str]:
    """CSV text, one candidate a line (header first): id, generation, agent, status, hash,
    parameters, whole-run metrics, evaluated_at, reused_from."""
    params, metrics = _columns(run)
    buf = io.StringIO()
    w = csv.writer(buf)

    def flush() -> str:
        text = buf.getvalue()
        buf.seek(0)
        buf.truncate()
        return text

    w.writerow(["id", "generation", "agent", "status", "hash", *params, *metrics, "evaluated_at", "reused_from"])
    yield flush()
    for cid, gen, agent, status, digest, p, at, m, reused in _rows(run):
        p, m = p or {}, m or {}
        w.writerow([cid, gen, agent, status, digest, *[p.get(n, "") for n in params],
                    *["" if m.get(n) is None else m[n] for n in metrics], at.isoformat() if at else "", reused or ""])
        yield flush()


def json_chunks(run: Run) -> Iterator[str]:
    """JSON text ``{"run": {...}, "candidates": [...]}`` streamed in pieces."""
    goal = run.goal
    head = {**run_state(run), "goal": goal.pk, "workload": goal.workload, "target": goal.target,
            "shape_set": goal.shape_set, "objectives": goal.objectives, "constraints": run.constraints,
            "space": run.space, "seed": run.seed}
    yield '{"run": ' + json.dumps(head) + ', "candidates": ['
    first = True
    for cid, gen, agent, status, digest, p, at, m, reused in _rows(run):
        item = {"id": cid, "generation": gen, "agent": agent, "status": status, "hash": digest, "params": p,
                "metrics": m or {}, "evaluated_at": at.isoformat() if at else None, "reused_from": reused}
        yield ("" if first else ",\n") + json.dumps(item)
        first = False
    yield "]}\n"


def _recorded_file(goal) -> TuningCache | None:
    """The recorded file a replay goal searches, as it reads now (what importing it again
    gives); None for another goal or when the file cannot be read any more."""
    try:
        return goal.recorded_file()
    except (KeyError, OSError, TuningCacheError):
        return None


def kernel_tuner_cache(run: Run) -> dict[str, Any]:
    """The run's candidates as a Kernel Tuner cache dict (see the module docstring)."""
    goal = run.goal
    params = [p["name"] for p in run.space.get("parameters", [])]
    # the goal's values too: a run narrowed since may have candidates of values it no longer has
    labelled = run.label_space()
    goal_values = {p["name"]: p["values"] for p in goal.space.get("parameters", [])}
    tune_params = {p["name"]: [labelled_params(labelled, {p["name"]: v})[p["name"]]
                               for v in dict.fromkeys([*goal_values.get(p["name"], []), *p["values"]])]
                   for p in run.space.get("parameters", [])}
    problem_size: list[int] = []
    try:
        import kernels  # noqa: PLC0415

        shapes = kernels.get_workload(goal.workload).shapes(goal.shape_set)
        problem_size = [int(v) for v in shapes[0].values()] if len(shapes) == 1 else [len(shapes)]
        shape_list = [dict(s) for s in shapes]
    except KeyError:
        shape_list = []
    device_name, kernel_name = goal.target, goal.workload
    recorded = _recorded_file(goal)
    if recorded is not None:  # a replay: the device, kernel and problem size the file records
        device_name, kernel_name = recorded.device_name, recorded.kernel_name
        problem_size = list(recorded.problem_size or ())
    # the goal's objectives, under the fields a Kernel Tuner cache records them as
    primary = goal.objectives[0]
    field = recorded_field(primary["metric"])
    others = [(i, o["metric"], recorded_field(o["metric"])) for i, o in enumerate(goal.objectives)
              if o["metric"] != "latency_ms"]
    cache: dict[str, dict[str, Any]] = {}
    done = Candidate.objects.filter(run=run).exclude(status__in=PENDING_STATUSES)
    kept = done.filter(source=goal.source).exclude(status__in=UNJUDGED_STATUSES)
    skipped = done.count() - kept.count()
    rows = (kept.order_by("id")
            .values_list("id", "status", "params", "evaluated_at", "evidence__metrics", "evidence__samples_ms",
                         "evidence__fingerprint__compile_s")
            .iterator(chunk_size=CHUNK))
    for cid, status, p, at, m, samples, compile_s in rows:
        if set(p) != set(params):
            skipped += 1
            continue
        entry: dict[str, Any] = labelled_params(labelled, {n: p[n] for n in params})
        key = ",".join(map(str, entry.values()))
        if key in cache:
            continue
        m = m or {}
        if status == "ok":
            samples = samples or {}
            if field == "time" or m.get("latency_ms") is not None:
                entry["time"] = m.get("latency_ms")
            for i, metric, name in others:  # every objective, so that the file reads back with them all
                if i == 0 or m.get(metric) is not None:
                    entry[name] = m.get(metric)
            series = [list(v) for v in samples.values() if v]
            if len(series) == 1:
                entry["times"] = series[0]
            elif series:
                n = min(len(s) for s in series)
                entry["times"] = [sum(s[i] for s in series) for i in range(n)]
                entry["times_per_shape"] = samples
            if m.get("gflops") is not None:
                entry["GFLOP/s"] = m["gflops"]
            for k in ("gbps", "max_rel_error", "roofline_pct"):
                if m.get(k) is not None:
                    entry[k] = m[k]
        else:
            entry["time"] = entry[field] = FAILURE_MARKERS.get(status, "RuntimeFailedConfig")
            entry["status"] = status
        # Kernel Tuner's bookkeeping times (ms): as recorded for a replay, our compile time otherwise
        for name, metric in COST_FIELDS.items():
            if m.get(metric) is not None:
                entry[name] = m[metric]
        if "compile_time" not in entry and isinstance(compile_s, (int, float)):
            entry["compile_time"] = compile_s * 1000.0
        entry["candidate"] = cid
        entry["timestamp"] = at.isoformat() if at else None
        cache[key] = entry
    return {
        "device_name": device_name,
        "kernel_name": kernel_name,
        "problem_size": problem_size,
        "shape_set": goal.shape_set,
        "shapes": shape_list,
        "tune_params_keys": params,
        "tune_params": tune_params,
        "objective": field,
        "objective_higher_is_better": primary["direction"] == "maximize",
        "run": run.pk,
        "skipped_candidates": skipped,
        "cache": cache,
    }
