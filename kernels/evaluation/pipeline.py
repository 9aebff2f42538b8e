"""Sandboxed evaluation of one candidate: compile, run in a child, validate, classify.

Protocol (docs/design.md, "Evaluation protocol"):

1. Compile in this (trusted) process; failure -> ``compile_error`` with the compiler log.
2. Run the candidate only in a confined child process (:mod:`kernels.sandbox.spawn`): own session,
   wall-clock timeout that kills the process group, resource limits, empty environment,
   private directory, no network, no writes outside that directory, unprivileged user.
3. Two children run one after the other, each in its own private directory, within one
   wall-clock budget; each is started ahead and loads its inputs (the validation child while
   the compiler runs, the timing child while the validation is judged), then waits, before
   its lockdown, for its directory to be complete (:class:`kernels.sandbox.spawn.PendingChild`): a *validation* child with spinning OpenMP threads
   (``OMP_WAIT_POLICY=ACTIVE``: parallel regions start together, so data races show) and a
   *timing* child with sleeping ones (``PASSIVE``: stable medians when other processes
   compete for the cores; measurement in :mod:`kernels.evaluation.timing`). Each gives the candidate
   guarded buffers (sentinels before and after every array; the CPU child also 1 MiB of
   inaccessible pages beyond them, :mod:`kernels.sandbox.guard_pages`, where an overrun faults at once
   and the child's fault helper names the buffer), NaN-fills outputs before every call, and
   calls the kernel:
   - validation: twice per case (fresh seed per case): every timed shape, each odd shape
     (not a multiple of any tile) with two seeds, and the workload's stored failure cases
     (:mod:`kernels.validation_store`, the latest ``KERNELS_VALIDATION_STORE_LIMIT``);
   - timing (only when every validation case passed: the validation child's cases are
     judged first): the timing loop rotates between two input sets, with two values of a
     row of every input swapped before each call (undone after it), so no call sees contents
     an earlier one saw: a kernel that caches results by a few input elements gets the last
     timed call wrong, judged against the reference of the inputs as that call saw them;
     caches flushed before every rep (the call's own buffers evicted from every cache level,
     :class:`~kernels.evaluation.timing.Evictor`); then one more call with *fresh contents written into
     the same buffers* (same pointers), which a kernel that caches results by pointer or by
     call count gets wrong. After every warm-up and timed call (untimed) 64 output elements
     drawn from OS entropy must be written (not NaN), and one such call per shape, drawn
     uniformly as the calls happen, keeps its outputs for full validation (CPU child). The
     first call of each shape is reported apart from the timed samples (the warm-up
     discards it; :mod:`kernels.evaluation.first_call`), after trusted code started the OpenMP thread
     team.
   Every output is copied right after the call returns and compared with the buffer again
   later: a change means work continued after the return (e.g. a thread outliving the call).
   Every file the CPU child saves is reported with its sha256, and judged only while it
   matches (the candidate can write in the child's directory).
4. This process generates every input from (shape, seed) once, while the compiler runs, and
   saves each set into the directory of the child that uses it (the children load instead of
   generating again; :class:`kernels.evaluation.judge.Expected`); it keeps its own copies, computes the float64
   references (ahead where always needed) and classifies in one place, :func:`kernels.evaluation.judge.judge`:
   guards intact, inputs unchanged (the CPU child reports a sha256 digest of each input
   buffer after the calls, compared here with the digest of this process's copy; the CUDA
   child saves its inputs for this process to compare), no late writes (else ``invalid``); finite, within
   tolerance, repeated calls agreeing, timed, drawn and fresh-contents outputs correct and
   no timed call leaving its output unwritten (else ``wrong_result``); measured bandwidth and FLOP rate
   within ``roofline_margin`` times this host's measured copy bandwidth and FMA throughput
   (:mod:`kernels.hostperf`; else ``invalid``). Before any value is judged, each case's
   float64 reference must be finite and within the workload's magnitude bound
   (:mod:`kernels.evaluation.reference_check`): a case whose reference is not is the workload's
   failure, ``invalid_input`` (outranked by the candidate's own ``invalid`` and
   ``wrong_result`` on usable references), and a stored case whose reference is not is
   skipped with a note. Inputs that exposed a wrong result (on a usable reference) are
   added to the validation store.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import numpy as np

from kernels import config, hostperf
from kernels.backends import Backend, get_backend
from kernels.backends.cpu import CompileError, CpuBackend
from kernels.backends.replay import evaluate_replay
from kernels.evaluation.cases import SENTINELS_ONLY, Expected, plan_cases
from kernels.evaluation.cuda_pipeline import evaluate_cuda
from kernels.evaluation.first_call import first_call_note
from kernels.evaluation.judge import judge, reference_notes, reported_flush, run_failure
from kernels.evaluation.pruning import Prune, judge_report
from kernels.evaluation.timing import BenchSettings, evict_library, omp_environment
from kernels.evidence import Evidence
from kernels.hashing import candidate_hash
from kernels.outcome import Outcome
from kernels.sandbox.guard_pages import FAULT_SOURCE, GUARD_ELEMS, GuardLayout
from kernels.sandbox.policy import SandboxPolicy
from kernels.sandbox.spawn import ChildRun, PendingChild, start_child
from kernels.sandbox.workdirs import hand_over, make_workdir, place, private_tempdir, remove_tree
from kernels.space import SpaceError, format_defines
from kernels.validation_store import ValidationStore
from kernels.workloads import Workload, get_workload, shape_label

__all__ = ["BenchSettings", "Evidence", "evaluate"]


def _evict_library(be: Backend, bench: BenchSettings, sections: list[str]) -> Path | None:
    """The compiled native timing helper (CPU backend), or None: the cache eviction of the
    ``"evict"`` flush and the start of the OpenMP thread team before the candidate's first
    call (:func:`kernels.evaluation.timing.team_starter`), whatever the flush.

    Compiled like a candidate (same compiler, flags and cache) from trusted source; a
    failure is logged: the timing child falls back to the ``"rewrite"`` flush, and the
    candidate's first call starts the thread team.
    """
    if not be.capabilities.native_helpers:
        return None
    try:
        return evict_library()
    except (CompileError, OSError) as exc:
        instead = "rewrite flush instead" if bench.flush == "evict" else "the first call starts the thread team"
        sections.append(f"== cache-eviction helper ==\nnot available, {instead}: {exc}")
        return None


def _fault_library(sections: list[str]) -> Path | None:
    """The guard-fault helper (:data:`kernels.sandbox.guard_pages.FAULT_SOURCE`) compiled for this
    host, or None.

    Compiled like a candidate (same compiler, flags and cache) from trusted source; a failure
    is logged and the guard pages still stop overruns (the child dies by the signal without
    the line naming the buffer).
    """
    try:
        return Path(CpuBackend().compile(FAULT_SOURCE.read_text(), "").path)
    except (CompileError, OSError) as exc:
        sections.append(f"== guard-fault helper ==\nnot available, faults are not located: {exc}")
        return None


def _limits(be: Backend) -> dict:
    """Physical limits of ``be``'s target: the backend's own ``physical_limits()`` if it has
    one, this host's (:func:`kernels.hostperf.physical_limits`) where its capabilities say
    ``host_limits`` (cpu), else none."""
    own = getattr(be, "physical_limits", None)
    if callable(own):
        return dict(own())
    if be.capabilities.host_limits:
        return hostperf.physical_limits()
    return {}


def _own_writes(wl: Workload, cases: list[dict], timed: list[dict],
                layout: GuardLayout = SENTINELS_ONLY) -> tuple[int, int]:
    """(bytes, files) the sandbox child's trusted code saves for a candidate that behaves
    (:mod:`kernels.sandbox.child`): both calls' outputs per validation case; the last, drawn
    and fresh-contents calls' outputs per timed shape (whole guarded buffers of ``layout``, an
    ``.npy`` header and a partly used 4 KiB block each). Allowed besides the candidate's own disk
    quota: large shapes need far more than it (1.9 GB for FlashInfer's 14,509-row RMSNorm),
    and nothing more is allowed: what the child saves only when the candidate misbehaves
    (late copies, changed inputs) comes out of the candidate's quota."""
    def out_bytes(shape: dict) -> int:
        return sum(layout.size(int(np.prod(s))) * 4 + 4096 + 128 for s in wl.output_shapes(shape).values())

    nbytes = 2 * sum(out_bytes(c["shape"]) for c in cases) + 3 * sum(out_bytes(t["shape"]) for t in timed)
    return nbytes, len(wl.outputs) * (2 * len(cases) + 3 * len(timed))


def _stopped_timing(run: ChildRun, prune: Prune | None, timed: list[dict],
                    validated: list[dict]) -> tuple | None:
    """``(status, reason, metrics=..., samples_ms=..., cases=...)`` for :func:`evaluate`'s
    ``finish`` when the timing child was cancelled or pruned, else None (judge it in full).

    Pruned by the parent's wall clock: the validation cases and ``pruned_after_s``. Pruned
    by its own calls: the partial evidence of :func:`kernels.evaluation.pruning.judge_report`; a report
    the calls do not bear out is a ``runtime_error``."""
    if run.stopped == "cancelled":
        return Outcome.cancelled, f"cancelled during timing, after {run.wall_s:.2f} s", {"cases": validated}
    if run.stopped == "pruned" and prune is not None:
        return (Outcome.pruned,
                f"timing stopped after {run.wall_s:.2f} s of wall clock, past {prune.factor:g} x the incumbent's "
                f"timing ({prune.timing_wall_s:.2f} s) + {prune.slack_s:g} s",
                {"cases": validated, "metrics": {"pruned_after_s": run.wall_s}})
    if prune is None or run_failure(run, 1.0) is not None:
        return None
    try:
        result = json.loads(run.result.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None  # the judge says what is wrong with it
    if not isinstance(result, dict) or "pruned" not in result:
        return None
    try:
        reason, metrics, samples = judge_report(result, {t["id"]: shape_label(t["shape"]) for t in timed}, prune)
    except ValueError as exc:
        return Outcome.runtime_error, f"the timing child stopped early, but {exc}", {"cases": validated}
    metrics["pruned_after_s"] = run.wall_s
    return Outcome.pruned, reason, {"cases": validated, "metrics": metrics, "samples_ms": samples}


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
    sandbox: SandboxPolicy | None = None,
    validation_store: ValidationStore | None = None,
    launch_plan: dict | None = None,
    compile_options: dict | None = None,
    prune: Prune | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> Evidence:
    """Compile, validate and time one candidate in a sandboxed child process.

    Args:
        workload: registered workload name, e.g. ``"rmsnorm"``.
        source: candidate source defining the workload's C entry point.
        params: parameter values, prepended as ``#define NAME value`` lines.
        shape_set: the workload's shape set to time (and validate, plus odd shapes).
        backend: registered backend name; ``replay`` (or a ``replay:`` target) and ``cuda``
            (or a ``cuda-`` target) route to their backend's evaluation, every other backend
            runs here, its :class:`~kernels.backends.Capabilities` deciding the host limits and
            the native helpers.
        timeout_s: wall-clock limit (s) of the two children together (validation, then
            timing gets what is left); compile has its own 60 s limit.
        bench: timing protocol; default :class:`BenchSettings()`.
        seed: base seed of all input sets; default a fresh random one. Per-case seeds are
            recorded in ``cases``.
        target: the target, needed for ``replay:<dataset>``: then (or with
            ``backend="replay"``) the recorded evidence of ``params`` is returned without
            compiling or running anything (:func:`kernels.backends.replay.evaluate_replay`;
            ``workload`` is the recorded kernel name, ``source`` is ignored).
        sandbox: confinement of the child; default :meth:`SandboxPolicy.from_env`.
        validation_store: where failure cases are read from and added to; default
            ``ValidationStore()`` (``KERNELS_DATA_DIR``). ``KERNELS_VALIDATION_STORE_LIMIT=0``
            turns the store off.
        launch_plan: CUDA only: the candidate's launch plan (dict for
            :meth:`kernels.backends.cuda.LaunchPlan.from_dict`); default the template's.
        compile_options: CUDA only: ``{"compiler": "nvrtc"|"nvcc", "extra": [...]}``.
            ``backend="cuda"`` or a ``cuda-smXY`` target runs :func:`kernels.evaluation.cuda_pipeline.evaluate_cuda`.
        prune: CPU backend: when to stop the timing of a hopeless candidate
            (:mod:`kernels.evaluation.pruning`): each timed shape's calls against ``prune.factor`` times the
            incumbent's median there (the child stops, this process checks its calls), and the
            timing child's wall clock against :meth:`~kernels.evaluation.pruning.Prune.deadline_s`
            (measured here). Either ends in ``pruned`` with the calls so far; default: no pruning.
        cancelled: CPU backend: asked while a child runs (about every 50 ms) and between
            steps; True stops the evaluation (the child's group is killed) with ``cancelled``.

    Returns:
        :class:`Evidence`; every candidate failure is an outcome, never an exception.

    Raises:
        KeyError: unknown workload, shape set or backend.
        ValueError: ``timeout_s`` not a positive finite number of seconds.
        ImportError: ``backend="cuda"`` on a host without cupy.
        OSError: the sandbox cannot be started (infrastructure failure, not the candidate's);
            :class:`kernels.sandbox.spawn.SandboxError` when the child could not confine itself.
    """
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < 1e6:
        raise ValueError(f"evaluate: timeout_s must be a number of seconds in (0, 1e6), not {timeout_s!r}")
    if backend == "replay" or (target or "").startswith("replay:"):
        return evaluate_replay(workload, params, target=target)
    if backend == "cuda" or (target or "").startswith("cuda-"):  # no pruning or cancelling there yet
        return evaluate_cuda(workload, source, params, shape_set=shape_set, timeout_s=timeout_s, bench=bench,
                             seed=seed, target=target, launch_plan=launch_plan, compile_options=compile_options,
                             sandbox=sandbox, validation_store=validation_store)
    start = time.monotonic()
    wl = get_workload(workload)
    wl.shapes(shape_set)  # KeyError early for an unknown shape set
    if hasattr(wl, "for_shape_set"):
        wl = wl.for_shape_set(shape_set)  # attributes (e.g. eps) of the shape set's model
    be = get_backend(backend)
    bench = bench or BenchSettings()
    policy = sandbox or SandboxPolicy.from_env()
    omp, omp_validation = omp_environment("timing"), omp_environment("validation")
    base_seed = int(seed) if seed is not None else secrets.randbits(62)
    fingerprint = {**be.fingerprint(), "shape_set": shape_set, "bench": bench.to_dict(), "seed": base_seed,
                   "omp": omp, "omp_validation": omp_validation}
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
    if cancelled is not None and cancelled():
        return finish(Outcome.cancelled, "cancelled before it was compiled")
    if prune is not None:
        fingerprint["prune"] = prune.to_dict()
    limits = _limits(be)  # measured once per host (before anything else runs, so nothing competes)
    fingerprint["limits"] = limits
    store_limit = config.validation_store_limit()
    store = validation_store or ValidationStore()
    stored = store.cases(wl.name, store_limit) if store_limit else []
    cases_plan, timed = plan_cases(wl, shape_set, base_seed, stored)
    # Inaccessible pages around every buffer of the CPU child, and its fault helper (compiled
    # once per compile cache, before the validation child starts: that child needs it).
    native = be.capabilities.native_helpers
    layout = GuardLayout.for_host() if native else SENTINELS_ONLY
    fault_lib = _fault_library(sections) if native else None
    # One private directory per child: nothing the validation child writes (it could replace
    # the library) reaches the timing child. Inputs depend only on the plan: generated once,
    # while the compiler runs, into the directory of the child that uses them.
    # Each directory stays this process's alone (mode 0700) until its child starts: nothing
    # sandboxed can plant a link where this process still writes.
    workdirs: dict[str, Path] = {}
    logdir: Path | None = None
    expected: Expected | None = None
    pending: dict[str, PendingChild] = {}
    starter: Future | None = None
    request = {
        "backend": getattr(be, "name", backend),
        "workload": wl.name,
        "shape_set": shape_set,
        "guard": GUARD_ELEMS,
        "guard_layout": layout.to_dict(),
        "fault_library": str(fault_lib) if fault_lib is not None else None,
        "bench": bench.to_dict(),
        "evict_library": None,
        "attrs": dict(wl.attrs),  # e.g. eps, as in force here for the shape set
    }

    def start_phase(phase: str, budget_s: float) -> None:
        """Start ``phase``'s child: it loads its input files and waits for the go."""
        expected.wait(phase)  # its input files are written
        if expected.stop:
            return  # the evaluation ended first (e.g. a compile error): nothing to start
        (logdir / phase).mkdir()
        cases, items = expected.with_files(phase, cases_plan if phase == "validation" else [],
                                           timed if phase == "timing" else [])
        if prune is not None:  # per shape: k times the incumbent's median there (ms), where it has one
            items = [{**t, "prune_ms": prune.limit_ms(shape_label(t["shape"]))} for t in items]
        req = {**request, "cases": cases, "timed": items, "library": str(workdirs[phase] / "candidate.so")}
        env = omp_validation if phase == "validation" else omp
        own_bytes, own_files = _own_writes(wl, cases, items, layout)
        pending[phase] = start_child(req, workdirs[phase], logdir / phase, budget_s, policy=policy, env=env,
                                     own_bytes=own_bytes, own_entries=own_files)

    deadline_s = prune.deadline_s() if prune is not None else None

    def stop(elapsed_s: float, phase: str) -> str | None:
        """Why the parent stops ``phase``'s child now: cancelled, or (timing) past the prune deadline."""
        if cancelled is not None and cancelled():
            return "cancelled"
        if phase == "timing" and deadline_s is not None and elapsed_s > deadline_s:
            return "pruned"
        return None

    def run_phase(phase: str, left_s: float) -> ChildRun:
        hand_over(policy, workdirs[phase], 0o700)  # every file is in: now the child's
        run = pending.pop(phase).go(left_s, stop=lambda t: stop(t, phase))
        if run.stdout:
            sections.append(f"== {phase} child stdout (tail) ==\n{run.stdout}")
        if run.stderr:
            sections.append(f"== {phase} child stderr (tail) ==\n{run.stderr}")
        return run

    try:
        for phase in ("validation", "timing"):
            workdirs[phase] = make_workdir(policy, {}, hand_over_dir=False)
        logdir = private_tempdir("log")
        expected = Expected(wl, cases_plan, timed, workdirs=workdirs, policy=policy).start()
        # The validation child starts (and loads its inputs) while the compiler runs.
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="start-child")
        starter = pool.submit(start_phase, "validation", timeout_s)
        pool.shutdown(wait=False)  # no more work: its thread ends with start_phase
        compiling = time.monotonic()
        try:
            artifact = be.compile(source, defines)
        except CompileError as exc:
            sections.append(f"== compile ==\n{exc.log}")
            return finish(Outcome.compile_error, str(exc))
        fingerprint["compile_s"] = round(time.monotonic() - compiling, 4)
        sections.append(f"== compile ==\n{'(cached)' if artifact.cached else artifact.log or '(no output)'}")
        if cancelled is not None and cancelled():
            return finish(Outcome.cancelled, "cancelled after it was compiled, before it ran")
        evict_lib = _evict_library(be, bench, sections)
        request["evict_library"] = str(evict_lib) if evict_lib is not None else None
        # Each child gets its own copy of the library. The eviction helper is loaded before the
        # lockdown, so it is read from the compile cache, never from a directory the candidate
        # can write.
        for d in workdirs.values():
            place(policy, d, "candidate.so", Path(artifact.path))
        # Two children, each in its own private directory, within one wall-clock budget:
        # validation with spinning OpenMP threads (races show), then timing with sleeping ones.
        # The timing child runs only for a candidate whose validation cases all passed; it
        # starts (loads its inputs) while this process judges the validation child's cases.
        starter.result()  # re-raises what starting the child raised
        runs: list[ChildRun] = [run_phase("validation", timeout_s)]
        if runs[0].stopped:
            return finish(Outcome.cancelled, f"cancelled during validation, after {runs[0].wall_s:.2f} s")
        deadline = time.monotonic() + timeout_s - runs[0].wall_s
        verdict = validated = None
        if not run_failure(runs[0], timeout_s):
            waited = time.monotonic()
            start_phase("timing", max(deadline - waited, 1.0))
            expected.join()  # references for the judge; nothing of ours competes with the timed calls
            early = judge(wl, cases_plan, [], runs, workdirs["validation"], timeout_s, limits, expected,
                           input_report=True, layout=layout)
            deadline += time.monotonic() - waited  # our waits and judging are not the candidate's time
            left = deadline - time.monotonic()
            if early[0] != Outcome.ok:
                verdict = early
                sections.append(f"== timing ==\nnot run: validation decided {early[0]}")
            elif left <= 0:
                runs.append(ChildRun(None, True, "", "", b""))  # budget spent by validation
            else:
                validated = early[2]
                runs.append(run_phase("timing", left))
                ended = _stopped_timing(runs[-1], prune, timed, validated)
                if ended is not None:
                    fingerprint["child_wall_s"] = {p: round(r.wall_s, 4) for p, r in zip(("validation", "timing"), runs)}
                    status, reason, kw = ended
                    return finish(status, reason, **kw)
        fingerprint["sandbox"] = runs[0].sandbox or {"error": "the child exited before reporting its sandbox"}
        fingerprint["child_wall_s"] = {p: round(r.wall_s, 4) for p, r in zip(("validation", "timing"), runs)}
        fingerprint["flush"] = reported_flush(runs[-1]) if len(runs) > 1 else None
        status, reason, cases, metrics, samples = verdict or judge(
            wl, cases_plan, timed, runs, (workdirs["validation"], workdirs["timing"]), timeout_s, limits, expected,
            validated, input_report=True, layout=layout)
    finally:
        if expected is not None:
            expected.cancel()  # first: a starter still waiting for its inputs gives up at once
        if starter is not None:
            wait([starter])
        for child in pending.values():  # started, never run: compile or validation decided
            child.cancel()
        for d in (*workdirs.values(), *([logdir] if logdir is not None else [])):
            remove_tree(d)
    if first_call_note(metrics):
        sections.append(f"== first call ==\n{first_call_note(metrics)}")
    notes = reference_notes(wl, cases)
    if notes:
        sections.append(notes)
    # Only cases a usable reference judged wrong: never an invalid_input or skipped one.
    wrong = [c for c in cases if c["verdict"] == Outcome.wrong_result]
    if wrong and store_limit:
        try:
            added = store.add_many(wl.name, wrong, candidate=candidate_hash(source, params, be.fingerprint()))
            sections.append(f"== validation store ==\n{added} new failure case(s) kept for '{wl.name}' "
                            f"({len(wrong) - added} already kept) in {store.path(wl.name)}")
        except (OSError, ValueError) as exc:
            sections.append(f"== validation store ==\ncould not keep the failure cases: {exc}")
    return finish(status, reason, metrics=metrics, samples_ms=samples, cases=cases)
