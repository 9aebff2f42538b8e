"""Sandboxed evaluation of one candidate: compile, run in a child, validate, classify.

Protocol (DESIGN.md, "Evaluation protocol"):

1. Compile in this (trusted) process; failure -> ``compile_error`` with the compiler log.
2. Run the candidate only in a child Python process: own session (process group), empty
   environment (``OMP_NUM_THREADS`` and a minimal ``PATH`` only), private temporary cwd,
   resource limits (address space, CPU seconds, file size, no core dumps), request on
   stdin, result on a dedicated pipe (so the candidate's prints cannot forge it), a
   wall-clock timeout that kills the whole process group.
3. The child calls the kernel twice per validation case, then times the shape set and
   leaves raw outputs/inputs as ``.npy`` files.
4. This process regenerates every input from (shape, seed), computes the float64
   reference and classifies in one place, :func:`_judge`.
"""

from __future__ import annotations

import json
import math
import secrets
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from kernels import config, stats
from kernels.backends import get_backend
from kernels.outcome import Outcome
from kernels.sandbox import ChildRun, run_child
from kernels.space import SpaceError, format_defines
from kernels.timing import BenchSettings
from kernels.workloads import Workload, get_workload, shape_label

__all__ = ["BenchSettings", "Evidence", "evaluate"]

GUARD_ELEMS = 1024  # 4 KiB sentinel region after every output
_GUARD_BITS = np.uint32(0xA5A5A5A5)
_TIMED_INPUT_SETS = 2  # input sets rotated between timed calls (fresh contents)

@dataclass(frozen=True)
class Evidence:
    """Everything measured about one candidate evaluation. Never modified once returned.

    Attributes:
        status: the classified :class:`~kernels.outcome.Outcome`.
        metrics: ``latency_ms`` (sum over the shape set of per-shape median latency, ms),
            ``latency_iqr_ms``, ``latency_ci_low_ms``/``latency_ci_high_ms`` (sums of the
            per-shape 95% bootstrap CI bounds of the median, ms), ``gbps`` (GB/s) and
            ``gflops`` (GFLOP/s) over the whole set, ``max_abs_error``, ``max_rel_error``,
            and per shape ``latency_ms[<label>]``, ``gbps[<label>]``. Partial or empty
            when ``status`` is not ``ok``.
        samples_ms: raw timing samples (ms) per timed shape label, e.g.
            ``"rows=512,hidden=4096"``.
        cases: per validation case ``{kind, label, shape, seed, max_abs_error,
            max_rel_error, passed, reason}``; ``kind`` is ``"validation"`` or
            ``"timed"`` (re-validation of the last timed call's output).
        log: compiler log, child stdout/stderr tails and the reason for ``status``.
        fingerprint: backend environment (compiler, flags, CPU) plus evaluation settings.
        duration_s: wall-clock seconds of the whole evaluation.
    """

    status: Outcome
    metrics: dict[str, float] = field(default_factory=dict)
    samples_ms: dict[str, list[float]] = field(default_factory=dict)
    cases: list[dict[str, Any]] = field(default_factory=list)
    log: str = ""
    fingerprint: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable (strict JSON: non-finite floats become ``None``)."""
        return _jsonable(
            {
                "status": str(self.status),
                "metrics": self.metrics,
                "samples_ms": self.samples_ms,
                "cases": self.cases,
                "log": self.log,
                "fingerprint": self.fingerprint,
                "duration_s": self.duration_s,
            }
        )


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, (np.floating, float)):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


# -- plan ------------------------------------------------------------------------------------


def _plan(wl: Workload, shape_set: str, base_seed: int) -> tuple[list[dict], list[dict]]:
    """Validation cases (every timed shape once, each odd shape twice) and timed items,
    with fresh seeds derived from ``base_seed``."""
    rng = np.random.default_rng(base_seed)

    def fresh() -> int:
        return int(rng.integers(0, 2**62))

    shapes = [dict(s) for s in wl.shapes(shape_set)]
    odd = [dict(s) for s in wl.validation_shapes.get(shape_set, ())]
    cases = [{"id": f"v{i}", "shape": s, "seed": fresh()} for i, s in enumerate(shapes)]
    for s in odd:
        for _ in range(2):
            cases.append({"id": f"v{len(cases)}", "shape": s, "seed": fresh()})
    timed = [
        {"id": f"t{i}", "shape": s, "seeds": [fresh() for _ in range(_TIMED_INPUT_SETS)]}
        for i, s in enumerate(shapes)
    ]
    return cases, timed


# -- classification --------------------------------------------------------------------------


class _Broken(Exception):
    """The child's results are missing or malformed (-> runtime_error)."""


def _load(workdir: Path, name: str, size: int) -> np.ndarray:
    path = workdir / name
    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r")
    except (OSError, ValueError, EOFError) as exc:
        raise _Broken(f"result file {name} missing or unreadable: {exc}") from None
    if arr.dtype != np.float32 or arr.size != size:
        raise _Broken(f"result file {name} has dtype {arr.dtype} shape {arr.shape}, expected {size} float32")
    return np.array(arr).reshape(-1)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return np.array_equal(a.view(np.uint32), b.view(np.uint32))


def _check_outputs(
    wl: Workload, shape: dict, buf_name: str, workdir: Path, ref: dict[str, np.ndarray]
) -> tuple[Outcome | None, str, dict[str, np.ndarray], float, float]:
    """Guard and accuracy of one call's outputs.

    Returns (verdict or None if passed, reason, outputs, max_abs_error, max_rel_error).
    """
    outs: dict[str, np.ndarray] = {}
    max_abs = max_rel = 0.0
    for name, oshape in wl.output_shapes(shape).items():
        n = int(np.prod(oshape))
        buf = _load(workdir, buf_name.format(out=name), n + GUARD_ELEMS)
        hit = np.count_nonzero(buf[n:].view(np.uint32) != _GUARD_BITS)
        if hit:
            return Outcome.invalid, f"wrote past the end of output '{name}' ({hit} of {GUARD_ELEMS} guard elements changed)", outs, math.nan, math.nan
        y = buf[:n].reshape(oshape)
        outs[name] = y
        bad = ~np.isfinite(y)
        if bad.any():
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            return Outcome.wrong_result, f"output '{name}' has {int(bad.sum())} NaN/inf elements of {n} (first at {first})", outs, math.nan, math.nan
        a, r = wl.errors(y, ref[name])
        max_abs, max_rel = max(max_abs, a), max(max_rel, r)
        if not r <= wl.tolerance:
            where = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(y - ref[name])), oshape))
            return Outcome.wrong_result, f"output '{name}': max_rel_error {r:.3g} > tolerance {wl.tolerance:g} (worst at {where})", outs, max_abs, max_rel
    return None, "", outs, max_abs, max_rel


def _check_inputs(wl: Workload, inputs: dict[str, np.ndarray], workdir: Path, name_fmt: str) -> str:
    for name, arr in inputs.items():
        after = _load(workdir, name_fmt.format(inp=name), arr.size).reshape(arr.shape)
        if not _same_bits(after, arr):
            changed = int(np.count_nonzero(after.view(np.uint32) != arr.view(np.uint32)))
            return f"modified input '{name}' ({changed} elements changed)"
    return ""


def _validate_case(wl: Workload, case: dict, workdir: Path) -> dict:
    shape, cid = case["shape"], case["id"]
    inputs = wl.generate(shape, case["seed"])
    ref = wl.reference(inputs, wl.attrs)
    record = {"kind": "validation", "label": shape_label(shape), "shape": shape, "seed": case["seed"],
              "max_abs_error": None, "max_rel_error": None, "passed": False, "reason": "", "verdict": None}
    why = _check_inputs(wl, inputs, workdir, f"{cid}_after_{{inp}}.npy")
    if why:
        record.update(reason=why, verdict=Outcome.invalid)
        return record
    v1, why1, y1, a1, r1 = _check_outputs(wl, shape, f"{cid}_call1_{{out}}.npy", workdir, ref)
    record.update(max_abs_error=a1, max_rel_error=r1)
    if v1:
        record.update(reason=f"first call: {why1}", verdict=v1)
        return record
    v2, why2, y2, a2, r2 = _check_outputs(wl, shape, f"{cid}_call2_{{out}}.npy", workdir, ref)
    if v2:
        record.update(reason=f"second call (repeatability): {why2}", verdict=v2)
        return record
    record.update(max_abs_error=max(a1, a2), max_rel_error=max(r1, r2))
    for name in y1:
        if not _same_bits(y1[name], y2[name]):
            _, diff = wl.errors(y1[name], y2[name].astype(np.float64))
            record["repeat_max_rel_diff"] = diff
            if not diff <= wl.tolerance:
                record.update(reason=f"repeated calls disagree on '{name}' (max rel diff {diff:.3g})", verdict=Outcome.wrong_result)
                return record
    record["passed"] = True
    return record


def _validate_timed(wl: Workload, item: dict, last_set: int, workdir: Path) -> dict:
    shape, tid = item["shape"], item["id"]
    sets = [wl.generate(shape, s) for s in item["seeds"]]
    seed = item["seeds"][last_set]
    record = {"kind": "timed", "label": shape_label(shape), "shape": shape, "seed": seed,
              "max_abs_error": None, "max_rel_error": None, "passed": False, "reason": "", "verdict": None}
    for j, inputs in enumerate(sets):
        why = _check_inputs(wl, inputs, workdir, f"{tid}_after{j}_{{inp}}.npy")
        if why:
            record.update(reason=f"during timing: {why}", verdict=Outcome.invalid)
            return record
    ref = wl.reference(sets[last_set], wl.attrs)
    verdict, why, _, a, r = _check_outputs(wl, shape, f"{tid}_last_{{out}}.npy", workdir, ref)
    record.update(max_abs_error=a, max_rel_error=r)
    if verdict:
        record.update(reason=f"last timed call: {why}", verdict=verdict)
        return record
    record["passed"] = True
    return record


def _parse_result(run: ChildRun, timed: list[dict]) -> dict[str, dict]:
    try:
        result = json.loads(run.result.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise _Broken(f"result pipe held garbage ({len(run.result)} bytes), not one JSON object") from None
    if not isinstance(result, dict):
        raise _Broken("result is not a JSON object")
    if result.get("ok") is not True:
        raise _Broken(f"child reported an error: {result.get('error')}\n{result.get('traceback', '')}")
    out = result.get("timed")
    if not isinstance(out, dict):
        raise _Broken("result lacks timing data")
    for item in timed:
        t = out.get(item["id"])
        ok = (
            isinstance(t, dict)
            and isinstance(t.get("samples_ms"), list)
            and len(t["samples_ms"]) > 0
            and all(isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s >= 0 for s in t["samples_ms"])
            and isinstance(t.get("last_set"), int)
            and 0 <= t["last_set"] < len(item["seeds"])
        )
        if not ok:
            raise _Broken(f"timing data for {shape_label(item['shape'])} is missing or malformed")
    return out


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _metrics(wl: Workload, timed: list[dict], result: dict, cases: list[dict]) -> tuple[dict, dict]:
    metrics: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    tot = {"median": 0.0, "iqr": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    total_bytes = total_flops = 0.0
    for item in timed:
        label = shape_label(item["shape"])
        s = [float(x) for x in result[item["id"]]["samples_ms"]]
        samples[label] = s
        summ = stats.summarize(s)
        for k in tot:
            tot[k] += summ[k]
        metrics[f"latency_ms[{label}]"] = summ["median"]
        if summ["median"] > 0:
            metrics[f"gbps[{label}]"] = wl.bytes(item["shape"]) / (summ["median"] * 1e-3) / 1e9
        total_bytes += wl.bytes(item["shape"])
        total_flops += wl.flops(item["shape"])
    metrics["latency_ms"] = tot["median"]
    metrics["latency_iqr_ms"] = tot["iqr"]
    metrics["latency_ci_low_ms"] = tot["ci_low"]
    metrics["latency_ci_high_ms"] = tot["ci_high"]
    if tot["median"] > 0:
        metrics["gbps"] = total_bytes / (tot["median"] * 1e-3) / 1e9
        metrics["gflops"] = total_flops / (tot["median"] * 1e-3) / 1e9
    errs = [c for c in cases if c["max_abs_error"] is not None and math.isfinite(c["max_abs_error"])]
    if errs:
        metrics["max_abs_error"] = max(c["max_abs_error"] for c in errs)
        metrics["max_rel_error"] = max(c["max_rel_error"] for c in errs)
    return metrics, samples


def _judge(wl: Workload, cases_plan: list[dict], timed: list[dict], run: ChildRun, workdir: Path, timeout_s: float):
    """The one place that maps a child run to an Outcome.

    Returns (status, reason, cases, metrics, samples_ms).
    """
    if run.timed_out:
        return Outcome.timeout, f"no result within {timeout_s:g} s wall clock; process group killed", [], {}, {}
    rc = run.returncode
    if rc is not None and rc < 0:
        return Outcome.runtime_error, f"child killed by {_signal_name(rc)}", [], {}, {}
    if rc != 0:
        return Outcome.runtime_error, f"child exited with code {rc}", [], {}, {}
    if not run.result:
        return Outcome.runtime_error, "child exited with code 0 without reporting a result", [], {}, {}
    try:
        result = _parse_result(run, timed)
        cases = [_validate_case(wl, c, workdir) for c in cases_plan]
        cases += [_validate_timed(wl, t, result[t["id"]]["last_set"], workdir) for t in timed]
    except _Broken as exc:
        return Outcome.runtime_error, str(exc), [], {}, {}
    metrics, samples = _metrics(wl, timed, result, cases)
    for verdict in (Outcome.invalid, Outcome.wrong_result):  # breaking a rule outranks wrong
        failed = [c for c in cases if c["verdict"] == verdict]
        if failed:
            reasons = "; ".join(f"{c['kind']} {c['label']} seed {c['seed']}: {c['reason']}" for c in failed[:5])
            return verdict, f"{len(failed)} of {len(cases)} cases failed: {reasons}", cases, metrics, samples
    peak = config.cpu_peak_gbps()
    for item in timed:
        label = shape_label(item["shape"])
        gbps = metrics.get(f"gbps[{label}]", 0.0)
        if gbps > peak:
            return Outcome.invalid, (
                f"measured {gbps:.1f} GB/s at {label}, above the physical limit {peak:g} GB/s "
                "(KERNELS_CPU_PEAK_GBPS): timing cannot be trusted"
            ), cases, metrics, samples
    return Outcome.ok, "all validation cases passed", cases, metrics, samples


# -- entry point -----------------------------------------------------------------------------


def evaluate(
    workload: str,
    source: str,
    params: dict,
    *,
    shape_set: str = "llama3-8b",
    backend: str = "cpu",
    timeout_s: float = 60.0,
    bench: BenchSettings | None = None,
    seed: int | None = None,
    target: str | None = None,
) -> Evidence:
    """Compile, validate and time one candidate in a sandboxed child process.

    Args:
        workload: registered workload name, e.g. ``"rmsnorm"``.
        source: candidate source defining the workload's C entry point.
        params: parameter values, prepended as ``#define NAME value`` lines.
        shape_set: the workload's shape set to time (and validate, plus odd shapes).
        backend: registered backend name.
        timeout_s: wall-clock limit (s) of the child (validation plus timing); compile has
            its own 60 s limit.
        bench: timing protocol; default :class:`BenchSettings()`.
        seed: base seed of all input sets; default a fresh random one. Per-case seeds are
            recorded in ``cases``.
        target: the target, needed for ``replay:<dataset>``: then (or with
            ``backend="replay"``) the recorded evidence of ``params`` is returned without
            compiling or running anything (:func:`kernels.backends.replay.evaluate_replay`;
            ``workload`` is the recorded kernel name, ``source`` is ignored).

    Returns:
        :class:`Evidence`; every candidate failure is an outcome, never an exception.

    Raises:
        KeyError: unknown workload, shape set or backend.
        OSError: the sandbox cannot be started (infrastructure failure, not the candidate's).
    """
    if backend == "replay" or (target or "").startswith("replay:"):
        from kernels.backends.replay import evaluate_replay  # noqa: PLC0415  (recorded data, trusted)

        return evaluate_replay(workload, params, target=target)
    start = time.monotonic()
    wl = get_workload(workload)
    wl.shapes(shape_set)  # KeyError early for an unknown shape set
    be = get_backend(backend)
    bench = bench or BenchSettings()
    base_seed = int(seed) if seed is not None else secrets.randbits(62)
    fingerprint = {**be.fingerprint(), "shape_set": shape_set, "bench": bench.to_dict(), "seed": base_seed}
    sections: list[str] = []

    def finish(status: Outcome, reason: str, **kw: Any) -> Evidence:
        sections.append(f"== verdict ==\n{status}: {reason}")
        for c in kw.get("cases", []):
            c["verdict"] = str(c["verdict"]) if c["verdict"] else None
        return Evidence(status=status, log="\n".join(sections), fingerprint=fingerprint,
                        duration_s=time.monotonic() - start, **kw)

    try:
        defines = format_defines(params)
    except (SpaceError, AttributeError, TypeError) as exc:
        return finish(Outcome.invalid, f"bad parameters: {exc}")
    from kernels.backends.cpu import CompileError  # noqa: PLC0415  (backend-specific error)

    try:
        artifact = be.compile(source, defines)
    except CompileError as exc:
        sections.append(f"== compile ==\n{exc.log}")
        return finish(Outcome.compile_error, str(exc))
    sections.append(f"== compile ==\n{'(cached)' if artifact.cached else artifact.log or '(no output)'}")

    cases_plan, timed = _plan(wl, shape_set, base_seed)
    request = {
        "library": str(artifact.path),
        "workload": wl.name,
        "guard": GUARD_ELEMS,
        "cases": cases_plan,
        "timed": timed,
        "bench": bench.to_dict(),
    }
    workdir = Path(tempfile.mkdtemp(prefix="int21-eval-"))
    logdir = Path(tempfile.mkdtemp(prefix="int21-log-"))
    try:
        run = run_child(request, workdir, logdir, timeout_s)
        if run.stdout:
            sections.append(f"== child stdout (tail) ==\n{run.stdout}")
        if run.stderr:
            sections.append(f"== child stderr (tail) ==\n{run.stderr}")
        status, reason, cases, metrics, samples = _judge(wl, cases_plan, timed, run, workdir, timeout_s)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(logdir, ignore_errors=True)
    return finish(status, reason, metrics=metrics, samples_ms=samples, cases=cases)
