"""Evaluate one engine plan in a sandbox child: the parent side of :mod:`engines._plan_child`.

An engine goal's candidate is a plan; it binds production kernels (C code that passed the
sandboxed evaluation and was promoted) and templates, and the swarm evaluates plans in its
worker processes. Those kernels are loaded only in a sandbox child confined exactly as the
evaluator's (:func:`kernels.sandbox.spawn.start_child`: sandbox user, network namespace, Landlock,
seccomp, resource limits, disk quota, empty environment), never in the web or worker process
(see the trust decision in :mod:`engines._binding`).

This process resolves what the plan binds from the registry it was given
(:func:`engines._plan_registry.plan_kernels`), compiles every one of those kernels with the CPU
backend (the child cannot run the compiler; same flags and content-addressed cache as the
evaluator), computes the encoder's reference embeddings (``minilm``: a child process of its
own, cached on disk), and runs one child (:class:`kernels.comparison.sandbox_side.SandboxSide`, request
mode ``"engine-check"``, runner :mod:`engines._plan_child`) with the libraries copied into its
private directory and the OpenMP timing environment (:func:`kernels.evaluation.timing.omp_environment`).
The child validates the plan and times its scenarios; :func:`run_plan_isolated` returns its
result, or how it failed as a :class:`kernels.Outcome` and a reason.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engines._plan import Plan
from engines._plan_registry import plan_kernels
from engines.minilm import SENTENCES, reference_embeddings
from engines.registry import engine_class
from kernels.backends import get_backend
from kernels.backends.cpu import CompileError
from kernels.comparison.sandbox_side import SandboxSide
from kernels.evaluation.timing import omp_environment
from kernels.outcome import Outcome
from kernels.sandbox.policy import SandboxError, SandboxPolicy
from kernels.sandbox.spawn import ChildRun
from kernels.space import SpaceError, format_defines

RUNNER = "engines._plan_child"
_TAIL = 2000  # characters of the child's stderr kept in a failure's message


@dataclass
class PlanRun:
    """What came back from a plan's child.

    Attributes:
        result: the child's result (``validation``, ``samples_ms``, ``blas_threads``) when it
            ran to its end, else None.
        failure: why there is no result (``compile_error``: a kernel of the plan does not
            compile; ``runtime_error``: the child crashed, exited, broke its disk quota,
            forged its report or reported an error; ``timeout``: it ran past its wall-clock
            limit and its process group was killed), else None.
        reason: the failure's reason for a person ("" when there is none).
        kernels: what the plan binds (:func:`engines._plan_registry.plan_kernels`, without
            sources), for the fingerprint.
        sandbox: the child's confinement report (:func:`kernels.sandbox.isolation.apply`), None
            when it died before writing it or never started.
        wall_s: seconds from the child's go to its exit; compile_s: seconds compiling.
        stderr: the tail of the child's stderr.
    """

    result: dict[str, Any] | None = None
    failure: Outcome | None = None
    reason: str = ""
    kernels: dict[str, Any] | None = None
    sandbox: dict | None = None
    wall_s: float = 0.0
    compile_s: float = 0.0
    stderr: str = ""


class _Failed(Exception):
    def __init__(self, outcome: Outcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome, self.reason = outcome, reason


def _compile(kernels: dict[str, Any]) -> dict[str, Path]:
    """Compile every spec of ``kernels`` (in place: each gets ``library``, its file's name in
    the child's directory); returns ``{name: compiled path}``.

    Raises:
        _Failed: ``compile_error``, naming the kernel.
    """
    be = get_backend("cpu")
    files: dict[str, Path] = {}
    named: dict[Path, str] = {}
    specs = [(f"production kernel of {w} (candidate {s.get('candidate')})", s)
             for w, ss in kernels["production"].items() for s in ss]
    specs += [(f"template of {w} ({_fmt(s.get('params') or {})})", s) for w, s in kernels["templates"].items()]
    for what, spec in specs:
        try:
            path = Path(be.compile(spec["source"], format_defines(spec.get("params") or {})).path)
        except (CompileError, SpaceError) as exc:
            raise _Failed(Outcome.compile_error, f"the {what} does not compile: {exc}") from exc
        name = named.get(path)
        if name is None:
            name = named[path] = f"k{len(files)}.so"
            files[name] = path
        spec["library"] = name
    return files


def _fmt(params: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in params.items()) or "defaults"


def _with_libraries(kernels: dict[str, Any], workdir: Path) -> dict[str, Any]:
    """``kernels`` with every ``library`` a path in the child's directory."""

    def at(spec: dict) -> dict:
        return {**spec, "library": str(workdir / spec["library"])}

    return {"production": {w: [at(s) for s in ss] for w, ss in kernels["production"].items()},
            "templates": {w: at(s) for w, s in kernels["templates"].items()}, "why": kernels["why"]}


def _run_failure(run: ChildRun, timeout_s: float) -> tuple[Outcome, str] | None:
    """How the child failed as a process (disk quota, timeout, signal, exit code, silence,
    a report not its own), or None."""
    if run.disk:
        return Outcome.runtime_error, f"the plan's child was killed: it {run.disk}"
    if run.timed_out:
        return Outcome.timeout, f"the plan's child gave no result within {timeout_s:g} s wall clock; process group killed"
    rc = run.returncode
    if rc is not None and rc < 0:
        try:
            how = signal.Signals(-rc).name
        except ValueError:
            how = f"signal {-rc}"
        return Outcome.runtime_error, f"the plan's child was killed by {how}"
    if rc != 0:
        return Outcome.runtime_error, f"the plan's child exited with code {rc}"
    if not run.result:
        return Outcome.runtime_error, "the plan's child exited with code 0 without reporting a result"
    if not run.authentic:
        return Outcome.runtime_error, ("the result on the pipe is not the plan's child's own report (its "
                                       "authentication code does not match): written or relayed by a kernel")
    return None


def run_plan_isolated(engine: str, config: str | None, plan: Plan, scenarios: tuple[str, ...], *, reps: int,
                      registry, target: str = "cpu-x86_64", timeout_s: float = 600.0,
                      policy: SandboxPolicy | None = None, reference=None) -> PlanRun:
    """Validate ``plan`` of ``engine`` and time its ``scenarios`` in a sandbox child (module).

    Args:
        registry: where the plan's production kernels (and a tuning's template points) come
            from (:class:`engines._binding.ProductionRegistry`).
        reps: timed calls per scenario.
        timeout_s: the child's wall-clock limit (s), its set-up included.
        policy: confinement (default :meth:`kernels.sandbox.spawn.SandboxPolicy.from_env`, as the
            evaluator's).
        reference: the encoder's reference embeddings (default computed here,
            :func:`engines.minilm.reference_embeddings`).

    Returns:
        :class:`PlanRun`: the child's result, or its failure and reason. Never raises for
        what a kernel or the child does; a registry's own error (e.g. the database) propagates.
    """
    kernels = plan_kernels(registry, plan, engine_class(engine).plan_spec.workloads, target)
    summary = {"production": {w: [{k: s.get(k) for k in ("candidate", "content_hash", "shape_set", "params")}
                                  for s in ss] for w, ss in kernels["production"].items()},
               "templates": {w: dict(s.get("params") or {}) for w, s in kernels["templates"].items()}}
    out = PlanRun(kernels=summary)
    started = time.monotonic()
    try:
        files = _compile(kernels)
        out.compile_s = time.monotonic() - started
        if engine == "minilm" and reference is None:
            try:
                reference = reference_embeddings(SENTENCES)
            except RuntimeError as exc:
                raise _Failed(Outcome.runtime_error, f"the encoder's reference embeddings: {exc}") from exc
        ref = None if reference is None else [list(map(float, row)) for row in reference]

        def request_for(workdir: Path) -> dict:
            return {"mode": "engine-check", "runner": RUNNER, "engine": engine, "config": config or None,
                    "plan": plan.to_dict(), "target": target, "scenarios": list(scenarios), "reps": int(reps),
                    "kernels": _with_libraries(kernels, workdir), **({"reference": ref} if ref is not None else {})}

        policy = policy or SandboxPolicy.from_env()
        try:
            side = SandboxSide(files, request_for, policy, omp_environment("timing"), timeout_s, turns=False,
                               tail_chars=_TAIL)
        except OSError as exc:  # SandboxError included
            raise _Failed(Outcome.runtime_error, f"the plan's sandbox child could not be started: {exc}") from exc
        try:
            run = side.child.end(timeout_s)
        except (SandboxError, RuntimeError) as exc:
            raise _Failed(Outcome.runtime_error, f"the plan's sandbox child: {exc}") from exc
        finally:
            side.close()
    except _Failed as exc:
        out.failure, out.reason = exc.outcome, exc.reason
        return out
    out.sandbox, out.wall_s, out.stderr = run.sandbox, run.wall_s, run.stderr[-_TAIL:]
    failed = _run_failure(run, timeout_s)
    if failed is None:
        try:
            result = json.loads(run.result.decode())
        except (UnicodeDecodeError, ValueError):
            result = None
        if not isinstance(result, dict):
            failed = Outcome.runtime_error, "the plan's child reported something that is not a JSON object"
        elif not result.get("ok"):
            failed = Outcome.runtime_error, f"the plan's child failed: {result.get('error') or 'no reason given'}"
        else:
            out.result = result
    if failed is not None:
        out.failure, out.reason = failed
    return out
