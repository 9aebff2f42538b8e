"""``python -m kernels``: list workloads, evaluate one candidate, tune a template.

Commands::

    python -m kernels workloads [--json]
    python -m kernels evaluate --workload rmsnorm --backend cpu --source k.c \\
        [--params '{"UNROLL": 4}'] [--shape llama3-8b] [--target T] [--seed S] [--quick] --json
    python -m kernels tune --workload rmsnorm --backend cpu --budget 20 [--shape test-small] \\
        [--seed S] [--quick] [--json]
    python -m kernels compare --workload rmsnorm [--shape S] --a a.c [--params-a JSON] \\
        --b b.c [--params-b JSON] [--rounds N] [--noise-floor F] [--no-validate] [--json]
    python -m kernels noise-floor --workload rmsnorm [--shape S] [--source k.c] [--params JSON] \\
        [--rounds N] [--json]

``evaluate --json`` prints one JSON object: ``status``, ``reason``, ``cases`` (per case
``kind``, ``label``, ``seed``, ``max_abs_error``, ``max_rel_error``, ``passed``,
``reason``), ``timing`` (per timed shape ``median_ms``, ``iqr_ms``, ``ci_low_ms``,
``ci_high_ms``, ``samples``), ``metrics`` (``latency_ms``, ``gflops`` (GFLOP/s), ``gbps``
(GB/s), ``roofline_pct``, ...), ``static_resources`` (when the backend reports them, e.g.
CUDA registers and occupancy; ``{}`` otherwise), ``fingerprint`` (including ``sandbox``) and
``duration_s``; ``--full`` adds the raw samples and the log. ``tune`` runs a seeded random
search over the workload's default design space with a progress bar on stderr and prints the
best candidate.

``compare`` first validates both kernels (``evaluate`` with the short timing protocol; skip
with ``--no-validate``), then measures them paired and interleaved in rounds
(:func:`kernels.comparison.paired.compare_paired`) and prints one object: ``verdict`` (``a_faster``,
``b_faster`` or ``tie``), ``ratio`` (median over rounds of B's time over A's), ``ci``
(``[low, high]``), ``noise_floor`` (fraction) and ``floor_source``, ``rounds``,
``round_ratios``, ``rounds_needed``, ``why``, ``shapes``, ``identical``, ``median_a_ms``,
``median_b_ms``, ``a_status``, ``b_status``. ``noise-floor`` measures this host's floor by
A/A (the template's first point by default) and stores it (``KERNELS_CACHE_DIR``).

Exit status: 0 when the (best) candidate is ``ok`` (``compare``: whatever the verdict), 1 when
it is not (``compare``: a kernel failed its validation or its paired measurement), 2 for
usage errors (unknown workload, shape set or backend, unreadable source, bad ``--params``, a
negative ``--seed``; ``compare`` and ``noise-floor``: a ``--target`` other than this host's
``cpu-<machine>``, and with the template a parameter or value outside its design space).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from kernels.backends import backend_for_target, capabilities, get_backend

__all__ = ["main"]

QUICK_BENCH = {"warmup_ms": 1.0, "rep_ms": 5.0, "min_reps": 5, "max_reps": 20, "flush_bytes": 1 << 20}


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m kernels", description="INT21 kernel library: workloads, evaluation, tuning.")
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("workloads", help="list workloads and their shape sets")
    w.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--workload", required=True, help="workload name, e.g. rmsnorm")
        sp.add_argument("--backend", default="cpu", help="cpu, cuda or replay (default cpu)")
        sp.add_argument("--shape", default=None, help="shape set name (default: the workload's first, e.g. llama3-8b)")
        sp.add_argument("--target", default=None, help="target, e.g. cpu-x86_64 or replay:<dataset>")
        sp.add_argument("--seed", type=int, default=None, help="base seed (default: fresh)")
        sp.add_argument("--timeout", type=float, default=60.0, help="wall-clock limit per evaluation, s (default 60)")
        sp.add_argument("--quick", action="store_true", help="short timing protocol (smoke tests, not for decisions)")

    e = sub.add_parser("evaluate", help="compile, validate and time one candidate in the sandbox")
    common(e)
    e.add_argument("--source", default=None, help="candidate source file (default: the workload's template)")
    e.add_argument("--params", default="{}", help="parameter values as a JSON object, e.g. '{\"UNROLL\": 4}'")
    e.add_argument("--json", action="store_true", help="print one JSON object (default: a summary)")
    e.add_argument("--full", action="store_true", help="with --json: include raw samples and the log")
    e.add_argument("--flashinfer-out", metavar="DIR", default=None,
                   help="also write the candidate as a FlashInfer Trace Solution (DIR/solution.json) and its "
                        "evidence as one Trace per workload entry (DIR/traces.jsonl); needs --shape "
                        "flashinfer-<definition>")

    t = sub.add_parser("tune", help="random search over the workload's default design space")
    common(t)
    t.add_argument("--budget", type=int, required=True, help="number of candidates to evaluate")
    t.add_argument("--source", default=None, help="template file (default: the workload's template)")
    t.add_argument("--json", action="store_true", help="print the result as one JSON object")

    c = sub.add_parser("compare", help="is B faster than A? paired, interleaved, in rounds")
    c.add_argument("--workload", required=True, help="workload name, e.g. rmsnorm")
    c.add_argument("--shape", default=None, help="shape set name (default: the workload's first)")
    c.add_argument("--a", required=True, metavar="FILE", help="source of kernel A (the reference side)")
    c.add_argument("--params-a", default="{}", help="A's parameter values as a JSON object")
    c.add_argument("--b", required=True, metavar="FILE", help="source of kernel B")
    c.add_argument("--params-b", default="{}", help="B's parameter values as a JSON object")
    floor_options(c)
    c.add_argument("--noise-floor", type=float, default=None,
                   help="judge against this floor (a fraction, e.g. 0.02) instead of the host's stored one")
    c.add_argument("--no-validate", action="store_true", help="skip the correctness check of both kernels")
    c.add_argument("--json", action="store_true", help="print one JSON object (default: a summary)")

    n = sub.add_parser("noise-floor", help="measure this host's noise floor by an A/A comparison and store it")
    n.add_argument("--workload", required=True, help="workload name, e.g. rmsnorm")
    n.add_argument("--shape", default=None, help="shape set name (default: the workload's first)")
    n.add_argument("--source", default=None, help="kernel source (default: the workload's template)")
    n.add_argument("--params", default=None, help="parameter values as a JSON object (default: the template's first point)")
    floor_options(n)
    n.add_argument("--json", action="store_true", help="print the stored entry as one JSON object")
    return p


def floor_options(sp: argparse.ArgumentParser) -> None:
    """Options of the paired measurement (``compare``, ``noise-floor``)."""
    sp.add_argument("--rounds", type=int, default=None, help="fresh pairs of children (default 8; floor: at least 12)")
    sp.add_argument("--target", default=None, help="target the floor is kept under (default cpu-<machine>)")
    sp.add_argument("--seed", type=int, default=None, help="base seed of the inputs (default: fresh)")
    sp.add_argument("--quick", action="store_true", help="few, short rounds (smoke tests, not for decisions)")


def _finite(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def _shape_set(workload: str, given: str | None) -> str:
    from kernels.workloads import get_workload  # noqa: PLC0415

    try:
        wl = get_workload(workload)
    except KeyError as exc:
        raise _UsageError(exc.args[0]) from None
    if given is None:
        return next(iter(wl.shape_sets))
    if given not in wl.shape_sets:
        hint = ("; FlashInfer Trace shape sets need the data set: set KERNELS_FLASHINFER_TRACE_DIR"
                if given.startswith("flashinfer-") else "")
        raise _UsageError(f"workload '{workload}' has no shape set '{given}' (known: {', '.join(wl.shape_sets)}){hint}")
    return given


def _check_backend(backend: str) -> None:
    from kernels.backends import BACKENDS  # noqa: PLC0415

    if backend not in BACKENDS:
        raise _UsageError(f"unknown backend '{backend}' (known: {', '.join(sorted(BACKENDS))})")


def _source(workload: str, backend: str, path: str | None, option: str = "--source") -> str:
    if path:
        try:
            return Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise _UsageError(f"cannot read {option} {path}: {exc}") from None
        except UnicodeDecodeError as exc:
            raise _UsageError(f"{option} {path} is not UTF-8 text (a kernel source is expected): {exc}") from None
    if capabilities(backend).recorded:
        return ""
    from kernels.templates import load_template  # noqa: PLC0415

    try:
        return load_template(workload, backend)
    except KeyError as exc:
        raise _UsageError(f"{exc.args[0]}; pass --source") from None


def _template_defaults(source: str) -> dict[str, int | float]:
    """A template's parameter defaults: its ``#ifndef NAME`` / ``#define NAME value`` pairs."""
    out: dict[str, int | float] = {}
    for name, value in re.findall(r"#ifndef\s+(\w+)\s*\n\s*#define\s+\1\s+(\S+)", source):
        for kind in (int, float):
            try:
                out[name] = kind(value)
                break
            except ValueError:
                pass
    return out


def _check_template_params(workload: str, backend: str, params: dict, source: str, *, option: str = "--params",
                           strict: bool = False) -> None:
    """With the workload's own template: a parameter the template's design space does not
    have is a usage error (a typo would otherwise be ignored: the template's default stands);
    a value outside the space is a usage error with ``strict``, else it is evaluated with a
    warning on stderr; a point (with the template's defaults) that breaks the space's
    restrictions gets a warning."""
    from kernels.templates import default_space  # noqa: PLC0415

    try:
        space = default_space(workload, backend)
    except KeyError:
        return  # no space to check against
    known = {p.name: p.values for p in space.parameters}
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise _UsageError(f"{option}: the {workload} {backend} template has no parameter {', '.join(unknown)} "
                          f"(its parameters: {', '.join(known)})")
    # 4.0 is not 4 (#define UNROLL 4.0 is not an integer) and False is not 0 to a template
    outside = [f"{k}={v!r}" for k, v in params.items() if not any(type(v) is type(x) and v == x for x in known[k])]
    if outside and strict:
        raise _UsageError(f"{option}: {', '.join(outside)} outside the template's design space "
                          f"({'; '.join(f'{k}: {list(known[k])}' for k in params if k in known)})")
    if outside:
        print(f"warning: {', '.join(outside)} outside the template's design space", file=sys.stderr)
    point = {**_template_defaults(source), **params}
    broken = space.broken_restrictions(point) if set(space.names) <= set(point) else []
    if broken:
        print(f"warning: the point breaks the template's restrictions: {'; '.join(broken)}", file=sys.stderr)


def _bench(quick: bool):
    from kernels.evaluation.timing import BenchSettings  # noqa: PLC0415

    return BenchSettings(**QUICK_BENCH) if quick else BenchSettings()


def _evaluate(args: argparse.Namespace, source: str, params: dict, shape_set: str, seed: int | None):
    from kernels.evaluation.pipeline import evaluate  # noqa: PLC0415

    try:
        return evaluate(
            args.workload, source, params, shape_set=shape_set, backend=args.backend,
            timeout_s=args.timeout, bench=_bench(args.quick), seed=seed, target=args.target,
        )
    except (KeyError, ValueError, ImportError) as exc:  # unknown names, bad target, no cupy
        raise _UsageError(exc.args[0] if exc.args else str(exc)) from None


def evidence_summary(ev: Any, *, full: bool = False) -> dict[str, Any]:
    """The ``evaluate --json`` object of one :class:`~kernels.evidence.Evidence`."""
    from kernels import stats  # noqa: PLC0415

    d = ev.to_dict()
    timing = {}
    for label, samples in ev.samples_ms.items():
        s = stats.summarize(samples)
        timing[label] = {"median_ms": s["median"], "iqr_ms": s["iqr"], "ci_low_ms": s["ci_low"],
                         "ci_high_ms": s["ci_high"], "samples": s["n"]}
        if f"first_call_ms[{label}]" in ev.metrics:  # the shape's first call, apart from the median
            timing[label]["first_call_ms"] = ev.metrics[f"first_call_ms[{label}]"]
        if full:
            timing[label]["samples_ms"] = samples
    static = d.get("static") or {}  # e.g. CUDA registers, spills, shared memory, occupancy
    reason = d["log"].rsplit("== verdict ==\n", 1)[-1].strip() if "== verdict ==" in d["log"] else ""
    out = {
        "status": d["status"],
        "reason": reason,
        "cases": [{k: c.get(k) for k in ("kind", "label", "seed", "max_abs_error", "max_rel_error", "passed", "reason")}
                  for c in d["cases"]],
        "timing": timing,
        "metrics": d["metrics"],
        "static_resources": static,
        "fingerprint": d["fingerprint"],
        "duration_s": d["duration_s"],
    }
    if full:
        out["log"] = d["log"]
    return out


def _cmd_workloads(args: argparse.Namespace) -> int:
    from kernels.workloads import WORKLOADS, shape_label  # noqa: PLC0415

    rows = []
    for name in sorted(WORKLOADS):
        wl = WORKLOADS[name]
        rows.append({
            "name": name,
            "signature": wl.c_signature,
            "tolerance": wl.tolerance,
            "shape_sets": {s: [dict(x) for x in shapes] for s, shapes in wl.shape_sets.items()},
            "validation_shapes": {s: [dict(x) for x in shapes] for s, shapes in wl.validation_shapes.items()},
        })
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415

    table = Table(title="workloads")
    for col in ("workload", "shape set", "timed shapes", "odd shapes (validated)"):
        table.add_column(col, overflow="fold")  # a name cut short with "…" cannot be typed back
    for r in rows:
        for s, shapes in r["shape_sets"].items():
            table.add_row(r["name"], s, "; ".join(shape_label(x) for x in shapes),
                          "; ".join(shape_label(x) for x in r["validation_shapes"].get(s, [])))
    Console().print(table)
    return 0


def _cmd_evaluate(args: argparse.Namespace) -> int:
    try:
        params = json.loads(args.params)
    except ValueError as exc:
        raise _UsageError(f"--params is not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise _UsageError("--params must be a JSON object")
    _check_backend(args.backend)
    shape_set = _shape_set(args.workload, args.shape) if not capabilities(args.backend).recorded else (args.shape or "")
    source = _source(args.workload, args.backend, args.source)
    if args.source is None and not capabilities(args.backend).recorded:
        cuda = args.backend == "cuda" or (args.target or "").startswith("cuda-")
        _check_template_params(args.workload, "cuda" if cuda else "cpu", params, source)
    if args.flashinfer_out is not None:
        if not shape_set.startswith("flashinfer-"):
            raise _UsageError("--flashinfer-out needs --shape flashinfer-<definition> (see `python -m kernels workloads`)")
        _writable_dir(Path(args.flashinfer_out))  # before the evaluation, not after it
    ev = _evaluate(args, source, params, shape_set, args.seed)
    summary = evidence_summary(ev, full=args.full)
    if args.json:
        print(json.dumps(summary, allow_nan=False, default=_finite))
    else:
        m = summary["metrics"]
        print(f"status: {summary['status']}  ({summary['reason']})")
        for label, t in summary["timing"].items():
            print(f"  {label}: median {t['median_ms']:.4g} ms  IQR {t['iqr_ms']:.3g}  "
                  f"CI [{t['ci_low_ms']:.4g}, {t['ci_high_ms']:.4g}]  n={t['samples']}")
        if "latency_ms" in m:
            print(f"  total {m['latency_ms']:.4g} ms, {m.get('gflops', 0):.3g} GFLOP/s, {m.get('gbps', 0):.3g} GB/s, "
                  f"{m.get('roofline_pct', float('nan')):.3g}% of roofline")
    if args.flashinfer_out is not None:  # after the summary: a failure here loses no result
        _write_flashinfer(Path(args.flashinfer_out), args.workload, source, params, shape_set, ev)
    return 0 if summary["status"] == "ok" else 1


def _writable_dir(out: Path) -> None:
    """Create ``out`` (a directory this process can write into) or raise a usage error."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _UsageError(f"--flashinfer-out: cannot make directory {out}: {exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise _UsageError(f"--flashinfer-out: directory {out} is not writable")


def _write_flashinfer(out: Path, workload: str, source: str, params: dict, shape_set: str, ev: Any) -> None:
    """``out/solution.json`` and ``out/traces.jsonl`` (one Trace per workload entry of the
    definition the shape set was imported from; see :mod:`kernels.interchange.flashinfer_trace`)."""
    from kernels.hashing import candidate_hash  # noqa: PLC0415
    from kernels.interchange import flashinfer_trace as fi  # noqa: PLC0415

    definition = shape_set[len(fi.IMPORTED_PREFIX):]
    target = ev.fingerprint.get("target") or f"{ev.fingerprint.get('backend', 'cpu')}-{ev.fingerprint.get('machine', '')}"
    name = f"int21-{workload}-{candidate_hash(source, params, {})[:12]}"
    try:
        solution = fi.export_solution(workload, source, params, name=name, author="int21 kernels CLI", target=target,
                                      definition=definition)
        entries = fi.load_workloads().get(definition, [])
        traces = [fi.export_trace(definition, e, name, ev) for e in entries]
    except (fi.FlashInferTraceError, OSError) as exc:
        raise _UsageError(f"--flashinfer-out: {exc}") from None
    try:
        (out / "solution.json").write_text(json.dumps(solution, indent=2, allow_nan=False) + "\n")
        (out / "traces.jsonl").write_text("".join(json.dumps(t, allow_nan=False) + "\n" for t in traces))
    except OSError as exc:
        raise _UsageError(f"--flashinfer-out: cannot write {out}: {exc}") from None
    print(f"wrote {out / 'solution.json'} and {len(traces)} traces to {out / 'traces.jsonl'}", file=sys.stderr)


def _cmd_tune(args: argparse.Namespace) -> int:
    import numpy as np  # noqa: PLC0415
    from rich.console import Console  # noqa: PLC0415
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    from kernels.space import point_key  # noqa: PLC0415
    from kernels.templates import default_space  # noqa: PLC0415

    if args.budget < 1:
        raise _UsageError("--budget must be >= 1")
    _check_backend(args.backend)
    shape_set = _shape_set(args.workload, args.shape)
    source = _source(args.workload, args.backend, args.source)
    try:
        space = default_space(args.workload, args.backend)
    except KeyError as exc:
        raise _UsageError(exc.args[0]) from None
    rng = np.random.default_rng(args.seed)
    points = space.sample(rng, args.budget)
    results: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    counts: Counter[str] = Counter()
    columns = (TextColumn("[bold]tune[/] {task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True)) as progress:
        task = progress.add_task(f"{args.workload} on {shape_set}", total=len(points))
        for i, params in enumerate(points):
            seed = None if args.seed is None else args.seed + 1 + i
            ev = _evaluate(args, source, params, shape_set, seed)
            counts[str(ev.status)] += 1
            row = {"params": params, "status": str(ev.status), "latency_ms": ev.metrics.get("latency_ms")}
            results.append(row)
            if ev.status == "ok" and (best is None or ev.metrics["latency_ms"] < best["metrics"]["latency_ms"]):
                best = {"params": params, "key": point_key(params), **evidence_summary(ev)}
            lat = f"{best['metrics']['latency_ms']:.4g} ms" if best else "-"
            progress.update(task, advance=1, description=f"{args.workload} on {shape_set}  best {lat}")
    out = {"workload": args.workload, "shape_set": shape_set, "evaluated": len(results),
           "status_counts": dict(counts), "best": best, "candidates": results}
    if args.json:
        print(json.dumps(out, allow_nan=False, default=_finite))
    elif best:
        print(f"best of {len(results)}: {best['params']}  latency {best['metrics']['latency_ms']:.4g} ms  "
              f"({best['metrics'].get('gbps', 0):.3g} GB/s)  statuses {dict(counts)}")
    else:
        print(f"no ok candidate among {len(results)}: statuses {dict(counts)}")
    return 0 if best else 1


QUICK_PAIRS = {"rounds": 4, "warmup_calls": 2, "min_calls": 5, "max_calls": 50, "round_ms": 20.0}


def _json_object(text: str, option: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _UsageError(f"{option} is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise _UsageError(f"{option} must be a JSON object")
    return value


def _pair_settings(args: argparse.Namespace):
    from kernels.comparison.paired import PairSettings  # noqa: PLC0415

    given = {**(QUICK_PAIRS if args.quick else {}), **({"rounds": args.rounds} if args.rounds is not None else {}),
             "seed": args.seed}
    try:
        return PairSettings(**given)
    except ValueError as exc:
        raise _UsageError(re.sub(r"^PairSettings: (rounds|seed)", r"--\1", str(exc))) from None


def _paired_target(target: str | None) -> str | None:
    """``--target`` of ``compare`` and ``noise-floor``: None (this host's ``cpu-<machine>``)
    or a target whose backend measures paired comparisons and serves it; else a usage error."""
    if target is None:
        return None
    try:
        backend = backend_for_target(target)
    except ValueError as exc:
        raise _UsageError(f"--target: {exc}") from None
    caps = capabilities(backend)
    if not caps.paired_turns:
        raise _UsageError(f"--target {target}: the {backend} backend does not run paired comparisons "
                          "(compare and noise-floor measure on this host's CPU: cpu-<machine>)")
    if caps.host_target and not get_backend(backend).supports(target):
        raise _UsageError(f"--target {target}: this host serves only its own {backend} target, "
                          f"{backend}-{platform.machine()}")
    return target


def _pair_params(workload: str, params: dict, source_path: str | None, source: str, option: str) -> None:
    """The parameters of one kernel of ``compare`` or ``noise-floor``: every value a finite
    int or float (not a bool: ``#define VEC true`` is no number); with the workload's template
    (no source file, or a file holding the template's text) also only the template's
    parameters, at values of its design space. A user's own source may define other names."""
    from kernels.space import SpaceError, format_defines  # noqa: PLC0415
    from kernels.templates import load_template  # noqa: PLC0415

    try:
        format_defines(params)
    except SpaceError as exc:
        raise _UsageError(f"{option}: {exc}") from None
    try:
        template = load_template(workload, "cpu")
    except KeyError:
        return
    if source_path is None or source.strip() == template.strip():
        _check_template_params(workload, "cpu", params, source, option=option, strict=True)


def _cmd_compare(args: argparse.Namespace) -> int:
    from kernels.comparison.paired import ComparisonFailed, Kernel, compare_paired  # noqa: PLC0415

    shape_set = _shape_set(args.workload, args.shape)
    kernels_ = {side: Kernel(_source(args.workload, "cpu", path, f"--{side.lower()}"),
                             _json_object(params, f"--params-{side.lower()}"))
                for side, path, params in (("A", args.a, args.params_a), ("B", args.b, args.params_b))}
    for (side, k), path in zip(kernels_.items(), (args.a, args.b)):
        _pair_params(args.workload, k.params, path, k.source, f"--params-{side.lower()}")
    args.target = _paired_target(args.target)
    settings = _pair_settings(args)
    if args.noise_floor is not None and not (math.isfinite(args.noise_floor) and 0 <= args.noise_floor < 1):
        raise _UsageError(f"--noise-floor must be a fraction in [0, 1), got {args.noise_floor}")
    out: dict[str, Any] = {"workload": args.workload, "shape_set": shape_set}
    failed = []
    for (side, k), path in zip(kernels_.items(), (args.a, args.b)):
        if args.no_validate:
            out[f"{side.lower()}_status"] = None
            continue
        args.backend, args.timeout = "cpu", 60.0
        args_quick, args.quick = args.quick, True
        ev = _evaluate(args, k.source, k.params, shape_set, args.seed)
        args.quick = args_quick
        out[f"{side.lower()}_status"] = str(ev.status)
        if ev.status != "ok":
            reason = ev.log.rsplit("== verdict ==\n", 1)[-1].strip()
            failed.append(f"{side} ({Path(path).name}) is {ev.status}: {reason}")
    if not failed:
        try:
            result = compare_paired(args.workload, kernels_["A"], kernels_["B"], shape_set=shape_set, target=args.target,
                                    settings=settings, noise_floor=args.noise_floor)
        except ComparisonFailed as exc:
            failed.append(str(exc))
        except (KeyError, ValueError) as exc:
            raise _UsageError(exc.args[0] if exc.args else str(exc)) from None
        else:
            out.update(result.to_dict())
    if failed:
        out["error"] = "; ".join(failed)
    if args.json:
        print(json.dumps(out, allow_nan=False, default=_finite))
    elif failed:
        print(f"not compared: {out['error']}")
    else:
        print(out["why"])
        for note in out.get("notes") or []:
            print(f"  note: {note}")
        for label, s in out["shapes"].items():
            print(f"  {label}: A {s['median_a_ms']:.4g} ms, B {s['median_b_ms']:.4g} ms, ratio {s['ratio']:.4f} "
                  f"(CI {s['ci'][0]:.4f}-{s['ci'][1]:.4f})")
        print(f"  noise floor {out['noise_floor']:.2%} ({out['floor_source']}), {out['rounds']} rounds"
              + ("; the two libraries are identical" if out["identical"] else ""))
    return 1 if failed else 0


def _cmd_noise_floor(args: argparse.Namespace) -> int:
    from kernels.comparison.paired import ComparisonFailed, Kernel, measure_noise_floor  # noqa: PLC0415
    from kernels.templates import default_space  # noqa: PLC0415

    shape_set = _shape_set(args.workload, args.shape)
    source = _source(args.workload, "cpu", args.source)
    if args.params is not None:
        params = _json_object(args.params, "--params")
    elif args.source is None:
        params = next(default_space(args.workload).iter_valid(), {})
    else:
        params = {}
    _pair_params(args.workload, params, args.source, source, "--params")
    target = _paired_target(args.target)
    settings = _pair_settings(args)
    try:
        entry = measure_noise_floor(args.workload, Kernel(source, params), shape_set=shape_set, target=target,
                                    settings=settings)
    except ComparisonFailed as exc:
        print(f"error: the A/A comparison failed: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(entry, allow_nan=False, default=_finite))
    else:
        print(f"noise floor of {entry['target']} for {args.workload} on {shape_set}: {entry['floor']:.2%} "
              f"({entry['rounds']} A/A rounds, ratios {min(entry['aa_ratios']):.4f}-{max(entry['aa_ratios']):.4f}); "
              f"kept as {entry['key']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit status (see the module docstring)."""
    args = _parser().parse_args(argv)
    try:
        if getattr(args, "seed", None) is not None and args.seed < 0:  # NumPy seeds are non-negative
            raise _UsageError(f"--seed must be a non-negative integer, got {args.seed}")
        return {"workloads": _cmd_workloads, "evaluate": _cmd_evaluate, "tune": _cmd_tune, "compare": _cmd_compare,
                "noise-floor": _cmd_noise_floor}[args.command](args)
    except _UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `| head`: the reader went away
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
