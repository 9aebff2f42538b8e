"""The classification of one evaluation, the same for every backend that runs candidates
(:mod:`kernels.evaluation.pipeline` for ``cpu``, :mod:`kernels.evaluation.cuda_pipeline` for
``cuda``; docs/design.md, "Evaluation protocol"): :func:`judge` reads what the children saved
(the plan and references of :mod:`kernels.evaluation.cases`, the checks of
:mod:`kernels.evaluation.checks`) and returns one :class:`Judgement`."""

from __future__ import annotations

import json
import math
import signal
from pathlib import Path
from typing import Any, NamedTuple

from kernels import stats
from kernels.evaluation.cases import SENTINELS_ONLY, Expected
from kernels.evaluation.checks import Broken, Tampered, validate_case, validate_timed
from kernels.evaluation.first_call import first_call_metrics
from kernels.evaluation.reference_check import ReferenceProblem, describe, fix_hint
from kernels.outcome import Outcome
from kernels.sandbox.guard_pages import GuardLayout, fault_report
from kernels.sandbox.spawn import ChildRun
from kernels.workloads import Workload, shape_label

# -- classification --------------------------------------------------------------------------


def _parse_result(run: ChildRun, timed: list[dict]) -> tuple[dict[str, dict], dict[str, dict], dict[str, str] | None]:
    """(timing data per timed item id, the child's input checks per set: ``result["inputs"]``,
    empty where the child saved its inputs instead, the digests of the files it saved:
    ``result["files"]``, None where it reports none). Raises :class:`Broken`."""
    try:
        result = json.loads(run.result.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Broken(f"result pipe held garbage ({len(run.result)} bytes), not one JSON object") from None
    if not isinstance(result, dict):
        raise Broken("result is not a JSON object")
    if result.get("ok") is not True:
        tb = result.get("traceback") or ""
        raise Broken(f"child reported an error: {result.get('error')}" + (f"\n{tb}" if tb else ""))
    out = result.get("timed")
    if not isinstance(out, dict):
        raise Broken("result lacks timing data")

    def index_ok(v: Any, n: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v < n

    for item in timed:
        t = out.get(item["id"])
        ok = (
            isinstance(t, dict)
            and isinstance(t.get("samples_ms"), list)
            and len(t["samples_ms"]) > 0
            and all(isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and s >= 0 for s in t["samples_ms"])
            and index_ok(t.get("last_set"), len(item["seeds"]))
            and index_ok(t.get("fresh_slot"), len(item["seeds"]))
            and all(k not in t or t[k] is None and k == "first_call_cpu_ms"
                    or (isinstance(t[k], (int, float)) and not isinstance(t[k], bool) and math.isfinite(t[k])
                        and t[k] >= 0) for k in ("first_call_ms", "first_call_cpu_ms"))
            and ("unwritten" not in t or (index_ok(t.get("calls"), 2**62) and index_ok(t["unwritten"], t["calls"] + 1)))
            and ("pick" not in t or (isinstance(t["pick"], dict) and isinstance(t["pick"].get("salt"), dict)
                                     and index_ok(t["pick"].get("set"), len(item["seeds"]))
                                     and index_ok(t["pick"].get("call"), 2**62)))
        )
        if not ok:
            raise Broken(f"timing data for {shape_label(item['shape'])} is missing or malformed")
    checks = result.get("inputs", {})
    if not (isinstance(checks, dict) and all(isinstance(v, dict) for v in checks.values())):
        raise Broken("the input checks are malformed")
    files = result.get("files")
    if files is not None and not (isinstance(files, dict) and all(isinstance(v, str) for v in files.values())):
        raise Broken("the digests of the saved files are malformed")
    return out, checks, files


def reported_flush(run: ChildRun) -> str | None:
    """The cache flush the timing child says it used (fingerprint only; never trusted for
    a verdict), or None."""
    try:
        flush = json.loads(run.result.decode("utf-8")).get("flush")
    except (UnicodeDecodeError, ValueError, AttributeError):
        return None
    return flush[:200] if isinstance(flush, str) else None


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _roofline_pct(flops: float, nbytes: float, seconds: float, limits: dict) -> float | None:
    """Achieved GFLOP/s over min(FMA peak, intensity * copy bandwidth), in %; None if unknown."""
    copy, peak = limits.get("copy_gbps"), limits.get("fma_gflops")
    if not copy or not peak or seconds <= 0 or nbytes <= 0:
        return None
    attainable = min(peak, flops / nbytes * copy)  # GFLOP/s
    if attainable <= 0:  # no FLOPs counted: a pure data-movement workload
        return 100.0 * (nbytes / seconds / 1e9) / copy
    return 100.0 * (flops / seconds / 1e9) / attainable


def _metrics(wl: Workload, timed: list[dict], result: dict, cases: list[dict], limits: dict) -> tuple[dict, dict]:
    metrics: dict[str, float] = {}
    samples: dict[str, list[float]] = {}
    tot = {"median": 0.0, "iqr": 0.0, "ci_low": 0.0, "ci_high": 0.0}
    total_bytes = total_flops = 0.0
    firsts: list[tuple[str, float | None, float, float | None]] = []
    for item in timed:
        label = shape_label(item["shape"])
        s = [float(x) for x in result[item["id"]]["samples_ms"]]
        samples[label] = s
        summ = stats.summarize(s)
        for k in tot:
            tot[k] += summ[k]
        metrics[f"latency_ms[{label}]"] = summ["median"]
        firsts.append((label, result[item["id"]].get("first_call_ms"), summ["median"],
                       result[item["id"]].get("first_call_cpu_ms")))
        nbytes, flops = wl.bytes(item["shape"]), wl.flops(item["shape"])
        if summ["median"] > 0:
            sec = summ["median"] * 1e-3
            metrics[f"gbps[{label}]"] = nbytes / sec / 1e9
            metrics[f"gflops[{label}]"] = flops / sec / 1e9
            pct = _roofline_pct(flops, nbytes, sec, limits)
            if pct is not None:
                metrics[f"roofline_pct[{label}]"] = pct
        total_bytes += nbytes
        total_flops += flops
    if timed:  # nothing timed (validation decided): no latency at all, not 0 ms
        metrics["latency_ms"] = tot["median"]
        metrics["latency_iqr_ms"] = tot["iqr"]
        metrics["latency_ci_low_ms"] = tot["ci_low"]
        metrics["latency_ci_high_ms"] = tot["ci_high"]
    metrics.update(first_call_metrics(firsts))  # beside latency_ms, never in it
    if tot["median"] > 0:
        sec = tot["median"] * 1e-3
        metrics["gbps"] = total_bytes / sec / 1e9
        metrics["gflops"] = total_flops / sec / 1e9
        pct = _roofline_pct(total_flops, total_bytes, sec, limits)
        if pct is not None:
            metrics["roofline_pct"] = pct
    errs = [c for c in cases if c["max_abs_error"] is not None and math.isfinite(c["max_abs_error"])]
    if errs:
        metrics["max_abs_error"] = max(c["max_abs_error"] for c in errs)
        metrics["max_rel_error"] = max(c["max_rel_error"] for c in errs)
    return metrics, samples


def run_failure(run: ChildRun, timeout_s: float) -> tuple[Outcome, str] | None:
    """How a child run failed as a process (disk quota, timeout, signal, exit code, silence),
    or None. A death by ``SIGSEGV``/``SIGBUS`` gives the fault helper's line where the child's
    stderr has one (:func:`kernels.sandbox.guard_pages.fault_report`: which buffer, which element)."""
    if run.disk:
        return Outcome.runtime_error, f"child killed: it {run.disk}"
    if run.timed_out:
        return Outcome.timeout, f"no result within {timeout_s:g} s wall clock; process group killed"
    rc = run.returncode
    if rc is not None and rc < 0:
        fault = fault_report(run.stderr) if -rc in (signal.SIGSEGV, signal.SIGBUS) else None
        return Outcome.runtime_error, f"child killed by {_signal_name(rc)}" + (f": {fault}" if fault else "")
    if rc != 0:
        return Outcome.runtime_error, f"child exited with code {rc}"
    if not run.result:
        return Outcome.runtime_error, "child exited with code 0 without reporting a result"
    if not run.authentic:
        return Outcome.runtime_error, ("the result on the pipe is not the child's own report (its authentication "
                                       "code does not match): written or relayed by the candidate")
    return None


class Judgement(NamedTuple):
    """How one evaluation is classified: its :class:`~kernels.outcome.Outcome`, the reason in
    words, the case records, the metrics (ms, GB/s, GFLOP/s, % of roofline) and the raw timing
    samples (ms) per shape label."""

    status: Outcome
    reason: str
    cases: list[dict]
    metrics: dict
    samples_ms: dict


def judge(wl: Workload, cases_plan: list[dict], timed: list[dict], run: ChildRun | list[ChildRun],
           workdir: Path | tuple[Path, Path], timeout_s: float, limits: dict | None = None,
           expected: Expected | None = None, validated: list[dict] | None = None, input_report: bool = False,
           layout: GuardLayout = SENTINELS_ONLY) -> Judgement:
    """The one place that maps child runs to an Outcome.

    Args:
        run: one child run that did everything, or the runs of the phases in order
            (validation, then timing); the first run that failed as a process decides, and
            the timing results come from the last run.
        workdir: the child's private directory, or (validation child's, timing child's).
        expected: inputs and references computed ahead (:class:`Expected`); default: computed
            here.
        validated: records of ``cases_plan`` already judged (by an earlier call on the
            validation run alone), used instead of judging those cases again.
        input_report: the child reports its input digests and those of the files it saved
            (the CPU child): a set without its input check or a run without the file
            digests is a ``runtime_error``, a file that no longer matches its digest
            ``invalid``.
        layout: where the sentinels of the buffers the children saved lie (the one the
            request gave them; default the sentinel-only layout of the CUDA child).

    Returns:
        :class:`Judgement`.
    """
    return Judgement(*_classify(wl, cases_plan, timed, run, workdir, timeout_s, limits, expected, validated, input_report, layout))


def _classify(wl: Workload, cases_plan: list[dict], timed: list[dict], run: ChildRun | list[ChildRun],
           workdir: Path | tuple[Path, Path], timeout_s: float, limits: dict | None,
           expected: Expected | None, validated: list[dict] | None, input_report: bool,
           layout: GuardLayout) -> tuple:
    limits = limits or {}
    expected = expected or Expected(wl)
    runs = list(run) if isinstance(run, (list, tuple)) else [run]
    for r in runs:
        failure = run_failure(r, timeout_s)
        if failure:
            return (*failure, [], {}, {})
    try:
        result: dict[str, dict] = {}
        checks: dict[str, dict] = {}
        files: dict[str, str] | None = {} if input_report else None
        for i, r in enumerate(runs):
            timing, reported, saved = _parse_result(r, timed if i == len(runs) - 1 else [])
            result.update(timing)
            checks.update(reported)
            if input_report:
                if saved is None:
                    raise Broken("the child reported no digests of the files it saved")
                files.update(saved)  # file names differ between the two children
        if input_report:  # a result without the report (e.g. forged through the pipe) is broken
            wanted = [f"{c['id']}_after" for c in cases_plan if validated is None]
            wanted += [f"{t['id']}_after{j}" for t in timed for j in range(len(t["seeds"]))]
            missing = [w for w in wanted if w not in checks]
            if missing:
                raise Broken(f"the child reported no input check for {', '.join(missing[:3])}")
            missing = [shape_label(t["shape"]) for t in timed if not {"unwritten", "pick"} <= set(result[t["id"]])]
            if missing:
                raise Broken(f"the child reported no check of unwritten outputs or no drawn call for "
                              f"{', '.join(missing[:3])}")
        vdir, tdir = workdir if isinstance(workdir, tuple) else (workdir, workdir)
        cases = (list(validated) if validated is not None
                 else [validate_case(wl, c, vdir, expected, checks, files, layout) for c in cases_plan])
        for t in timed:
            r = result[t["id"]]
            cases += validate_timed(wl, t, r["last_set"], r["fresh_slot"], tdir, expected, r.get("last_salt"),
                                     checks, (r["unwritten"], r["calls"]) if "unwritten" in r else None, files,
                                     r.get("pick"), layout)
    except Tampered as exc:
        return Outcome.invalid, str(exc), [], {}, {}
    except Broken as exc:
        return Outcome.runtime_error, str(exc), [], {}, {}
    metrics, samples = _metrics(wl, timed, result, cases, limits)
    # Breaking a rule outranks wrong; both are the candidate's, judged on usable references,
    # and outrank cases no candidate could pass (the workload's inputs, not the candidate).
    for verdict in (Outcome.invalid, Outcome.wrong_result, Outcome.invalid_input):
        failed = [c for c in cases if c["verdict"] == verdict]
        if failed:
            reasons = "; ".join(f"{c['kind']} {c['label']} seed {c['seed']}: {c['reason']}" for c in failed[:5])
            if verdict is Outcome.invalid_input:
                return verdict, (f"{len(failed)} of {len(cases)} cases cannot be judged (invalid input of the "
                                 f"workload, not the candidate's failure): {reasons}. To fix: "
                                 f"{fix_hint(wl.name, [c['label'] for c in failed])}"), cases, metrics, samples
            return verdict, f"{len(failed)} of {len(cases)} cases failed: {reasons}", cases, metrics, samples
    for item in timed:
        label = shape_label(item["shape"])
        for key, unit, limit in (("gbps", "GB/s", limits.get("gbps")), ("gflops", "GFLOP/s", limits.get("gflops"))):
            value = metrics.get(f"{key}[{label}]", 0.0)
            if limit and value > limit:
                return Outcome.invalid, (
                    f"measured {value:.1f} {unit} at {label}, above the physical limit {limit:.1f} {unit} "
                    f"({limits.get('source', '')}; margin x{limits.get('margin', 1):g}): timing cannot be trusted"
                ), cases, metrics, samples
    skipped = [c for c in cases if c.get("skipped")]
    if skipped:
        return Outcome.ok, (f"all validation cases passed ({len(skipped)} stored case(s) skipped: their float64 "
                            "reference is unusable: see the reference check in the log)"), cases, metrics, samples
    return Outcome.ok, "all validation cases passed", cases, metrics, samples


def reference_notes(wl: Workload, cases: list[dict]) -> str | None:
    """The ``== reference check ==`` log section: every case whose float64 reference could
    not judge the candidate (shape, seed, output, NaN/inf count, largest magnitude against
    the bound) and how to fix the workload's inputs; None when every reference was usable."""
    bad = [c for c in cases if c.get("reference")]
    if not bad:
        return None
    lines = [f"{c['kind']} {c['label']} seed {c['seed']}"
             f"{' (stored case, skipped)' if c.get('skipped') else ''}: {describe(ReferenceProblem(**p) for p in c['reference'])}"
             for c in bad]
    lines.append(f"to fix: {fix_hint(wl.name, [c['label'] for c in bad])}")
    return "== reference check ==\n" + "\n".join(lines)
