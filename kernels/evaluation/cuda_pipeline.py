"""Evaluation of CUDA candidates: what :func:`kernels.evaluate` does for ``backend="cuda"``.

Same protocol as the CPU path (:mod:`kernels.evaluation.pipeline`), with the CUDA-specific steps:

1. parse the launch plan (the template's default when none is given) against the workload's
   axes, attributes, buffers and the parameters: a malformed plan is ``invalid``;
2. compile (:meth:`CudaBackend.compile`): nvcc's resource report is the compile gate and the
   static evidence (registers, spills, shared memory, theoretical occupancy of every launch
   at every timed shape); kernels the plan names must exist;
3. resolve the plan at every validation and timed shape (grid, block, shared memory,
   arguments): a launch the hardware cannot run (block > 1024 threads, shared memory above
   the opt-in limit) is ``invalid``;
4. run :mod:`kernels.sandbox.cuda_child` in the sandbox (no address-space limit: the CUDA driver
   reserves virtual memory far beyond any sensible RLIMIT_AS; CUDA library paths passed
   through; the module file copied into the private directory);
5. classify with the CPU path's own :func:`~kernels.evaluation.judge.judge` (same files, same
   rules), against the GPU's datasheet limits (:meth:`CudaBackend.physical_limits`); an
   NVRTC failure in the child is ``compile_error``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import secrets
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kernels import config
from kernels.backends.cuda import CompileError, CudaBackend, import_cupy
from kernels.evaluation import static
from kernels.evaluation.cases import plan_cases
from kernels.evaluation.first_call import first_call_note
from kernels.evaluation.judge import judge, reference_notes
from kernels.evaluation.launch_plan import LaunchPlan, LaunchPlanError, plan_env, plan_names
from kernels.evaluation.timing import BenchSettings
from kernels.evidence import Evidence
from kernels.hashing import candidate_hash
from kernels.outcome import Outcome
from kernels.sandbox.guard_pages import GUARD_ELEMS
from kernels.sandbox.policy import SandboxPolicy
from kernels.sandbox.spawn import ChildRun, run_child
from kernels.sandbox.workdirs import make_workdir, private_tempdir, remove_tree
from kernels.space import SpaceError, format_defines
from kernels.templates import default_launch_plan
from kernels.validation_store import ValidationStore
from kernels.workloads import get_workload, shape_label

__all__ = ["CudaEvaluation", "evaluate_cuda", "static_summary"]

# Environment the CUDA child may see besides the sandbox's own: library locations and device
# selection only (no secrets). CuPy's kernel cache stays in memory.
_PASS_ENV = ("LD_LIBRARY_PATH", "CUDA_PATH", "CUDA_HOME", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")
_SUFFIX = {"nvrtc": ".cu", "cubin": ".cubin", "ptx": ".ptx"}


def _cuda_memory_bytes() -> int:
    """RLIMIT_AS of the CUDA child: ``$KERNELS_CUDA_SANDBOX_MEMORY_BYTES``, else 2**62 (no
    practical limit: cuInit reserves virtual address space for unified addressing and fails
    under a tight RLIMIT_AS), never above this process's own hard limit."""
    raw = os.environ.get("KERNELS_CUDA_SANDBOX_MEMORY_BYTES")
    want = int(float(raw)) if raw else 2**62
    hard = resource.getrlimit(resource.RLIMIT_AS)[1]
    return want if hard == resource.RLIM_INFINITY else min(want, hard)


def child_env() -> dict[str, str]:
    """Extra environment of the CUDA sandbox child."""
    env = {k: os.environ[k] for k in _PASS_ENV if os.environ.get(k)}
    env["CUPY_CACHE_IN_MEMORY"] = "1"  # NVRTC output stays in memory: no cache files
    env["CUDA_CACHE_DISABLE"] = "1"  # the driver's PTX JIT cache would write under $HOME
    return env


def static_summary(artifact_static: Mapping[str, Any], arch: str, launches_by_label: Mapping[str, list]) -> dict[str, Any]:
    """Static evidence: nvcc's per-kernel resources and the occupancy of every launch.

    Args:
        artifact_static: :attr:`CudaArtifact.static` (may be empty without nvcc).
        arch: target architecture.
        launches_by_label: ``{shape label: [ResolvedLaunch]}`` of the timed shapes.

    Returns:
        ``{"arch", "nvcc", "kernels": {name: resources}, "launches": [{"shape", "kernel",
        "grid", "block", "shared_mem_bytes", ...occupancy}], "limits": ArchLimits dict}``.
    """
    kernels = dict(artifact_static.get("kernels", {}))
    out: dict[str, Any] = {"arch": arch, "nvcc": artifact_static.get("nvcc"), "kernels": kernels,
                           "constant_bytes": artifact_static.get("constant_bytes"),
                           "limits": static.limits_dict(arch), "launches": []}
    for label, launches in launches_by_label.items():
        for l in launches:
            entry: dict[str, Any] = {"shape": label, "kernel": l.kernel, "grid": list(l.grid), "block": list(l.block),
                                     "shared_mem_bytes": l.shared_mem_bytes}
            info = kernels.get(l.kernel)
            if info:
                occ = static.occupancy(arch, l.block_threads, info["registers"], info["smem_static_bytes"],
                                       l.shared_mem_bytes, info["barriers"])
                entry.update({k: occ[k] for k in ("occupancy", "active_blocks_per_sm", "active_warps_per_sm",
                                                  "limiting_factor", "reason")})
            out["launches"].append(entry)
    return out


def _static_metrics(summary: Mapping[str, Any]) -> dict[str, float]:
    """A few static numbers as metrics (objectives/constraints for the search): per kernel
    ``registers[k]``, ``spill_bytes[k]``, ``smem_static_bytes[k]``; ``occupancy_min`` over
    all launches at the timed shapes."""
    m: dict[str, float] = {}
    for name, info in summary.get("kernels", {}).items():
        m[f"registers[{name}]"] = float(info["registers"])
        m[f"spill_bytes[{name}]"] = float(info["spill_stores"] + info["spill_loads"])
        m[f"smem_static_bytes[{name}]"] = float(info["smem_static_bytes"])
    occ = [l["occupancy"] for l in summary.get("launches", []) if "occupancy" in l]
    if occ:
        m["occupancy_min"] = float(min(occ))
    return m


def _child_compile_failure(raw: bytes) -> str | None:
    """The NVRTC log when the child reported ``stage: compile``, else None."""
    try:
        result = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if isinstance(result, dict) and result.get("ok") is False and result.get("stage") == "compile":
        return f"{result.get('error', '')}\n{result.get('log', '')}"
    return None


def _child_extras(raw: bytes) -> dict[str, Any]:
    try:
        result = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return {}
    if not isinstance(result, dict):
        return {}
    return {k: result[k] for k in ("device", "kernels") if isinstance(result.get(k), dict)}


class CudaEvaluation:
    """One CUDA evaluation in three steps: :meth:`prepare` (parameters, plan, compile, static
    evidence, resolved launches), :meth:`request` (what the sandbox child gets) and
    :meth:`judge` (classification of the child's files). :func:`evaluate_cuda` runs the
    child between the last two; tests can run :mod:`kernels.sandbox.cuda_child` in-process instead.

    Args: as :func:`evaluate_cuda`; ``require_cupy=False`` skips the early cupy check (tests
    with a stand-in cupy).
    """

    def __init__(self, workload: str, source: str, params: Mapping[str, Any], *, shape_set: str = "llama3-8b",
                 timeout_s: float = 60.0, bench: BenchSettings | None = None, seed: int | None = None,
                 target: str | None = None, launch_plan: Mapping[str, Any] | LaunchPlan | None = None,
                 compile_options: Mapping[str, Any] | None = None, validation_store: ValidationStore | None = None,
                 require_cupy: bool = True) -> None:
        self.start = time.monotonic()
        wl = get_workload(workload)
        wl.shapes(shape_set)
        if hasattr(wl, "for_shape_set"):
            wl = wl.for_shape_set(shape_set)
        self.wl, self.source, self.params, self.shape_set = wl, source, dict(params), shape_set
        self.timeout_s = timeout_s
        self.be = CudaBackend(target)
        if require_cupy:
            import_cupy()  # fail early and clearly: without cupy nothing can run
        self.bench = bench or BenchSettings()
        self.launch_plan, self.compile_options = launch_plan, compile_options
        self.base_seed = int(seed) if seed is not None else secrets.randbits(62)
        self.fingerprint: dict[str, Any] = {**self.be.fingerprint(), "shape_set": shape_set,
                                            "bench": self.bench.to_dict(), "seed": self.base_seed}
        self.sections: list[str] = []
        self.static: dict[str, Any] = {}
        self.store = validation_store or ValidationStore()
        self.store_limit = config.validation_store_limit()

    def finish(self, status: Outcome, reason: str, **kw: Any) -> Evidence:
        self.sections.append(f"== verdict ==\n{status}: {reason}")
        for c in kw.get("cases", []):
            c["verdict"] = str(c["verdict"]) if c["verdict"] else None
        return Evidence(status=status, log="\n".join(self.sections), fingerprint=self.fingerprint,
                        duration_s=time.monotonic() - self.start, static=self.static, **kw)

    def prepare(self) -> Evidence | None:
        """Everything before the child; an :class:`Evidence` when the candidate already
        failed (``invalid`` parameters or plan, ``compile_error``), else None."""
        wl, params = self.wl, self.params
        try:
            defines = format_defines(params)
        except (SpaceError, AttributeError, TypeError) as exc:
            return self.finish(Outcome.invalid, f"bad parameters: {exc}")
        try:
            raw = self.launch_plan
            if raw is None:
                raw = default_launch_plan(wl.name, params)
            plan = LaunchPlan.from_dict(raw, plan_names(wl, params))
        except (LaunchPlanError, KeyError) as exc:
            return self.finish(Outcome.invalid, f"bad launch plan: {exc}")
        self.fingerprint["launch_plan"] = plan.to_dict()
        self.custom_plan = plan.to_dict() if self.launch_plan is not None else None  # part of the hash
        compiling = time.monotonic()
        try:
            artifact = self.be.compile(self.source, defines, self.compile_options)
        except CompileError as exc:
            self.sections.append(f"== compile ==\n{exc.log}")
            return self.finish(Outcome.compile_error, str(exc))
        except ValueError as exc:
            return self.finish(Outcome.invalid, f"bad compile options: {exc}")
        self.artifact = artifact
        self.fingerprint["compile_options"] = artifact.options.to_dict()
        self.fingerprint["compile_s"] = round(time.monotonic() - compiling, 4)
        self.sections.append(f"== compile ({artifact.kind}) ==\n"
                             f"{'(cached)' if artifact.cached else artifact.log or '(no output)'}")
        found = artifact.static.get("kernels")
        if found is not None:
            missing = [k for k in plan.kernels if k not in found]
            if missing:
                hint = ' (kernels need extern "C" to keep their names)' if any(k.startswith("_Z") for k in found) else ""
                return self.finish(Outcome.compile_error,
                                   f"launch plan names kernels {missing} the source does not define "
                                   f"(found: {', '.join(found) or 'none'}){hint}")
        stored = self.store.cases(wl.name, self.store_limit) if self.store_limit else []
        self.cases_plan, self.timed = plan_cases(wl, self.shape_set, self.base_seed, stored)
        buffers = list(wl.inputs) + list(wl.outputs)
        self.launches: dict[str, list] = {}
        self.scratch: dict[str, dict[str, int]] = {}
        by_label: dict[str, list] = {}
        for item in [*self.cases_plan, *self.timed]:
            try:
                ls, sc = plan.resolve(plan_env(wl, item["shape"], params), buffers, arch=self.be.arch)
            except LaunchPlanError as exc:
                return self.finish(Outcome.invalid, f"launch plan at {shape_label(item['shape'])}: {exc}")
            self.launches[item["id"]] = [l.to_json() for l in ls]
            self.scratch[item["id"]] = sc
            if "seeds" in item:  # a timed item
                by_label[shape_label(item["shape"])] = ls
        self.static.update(static_summary(artifact.static, self.be.arch, by_label))
        notes = [f"{k}: {v['registers']} registers, {v['spill_stores']}+{v['spill_loads']} B spills, "
                 f"{v['smem_static_bytes']} B static smem, {v['stack_frame_bytes']} B stack"
                 for k, v in self.static.get("kernels", {}).items()]
        notes += [f"{l['kernel']} at {l['shape']}: no block fits an SM, the launch will fail ({l['reason']})"
                  for l in self.static.get("launches", []) if l.get("active_blocks_per_sm") == 0]
        self.sections.append("== static ==\n" + ("\n".join(notes) or "(nvcc not available)"))
        self.limits = self.be.physical_limits()
        self.fingerprint["limits"] = self.limits
        return None

    @property
    def module_name(self) -> str:
        """File name of the module inside the private directory."""
        return "candidate" + _SUFFIX[self.artifact.kind]

    def request(self, workdir: Path) -> dict[str, Any]:
        """The child's request, with the module copied to ``workdir / module_name``."""
        module = str(workdir / self.module_name)
        return {
            "library": module,
            "backend": "cuda",
            "workload": self.wl.name,
            "shape_set": self.shape_set,
            "attrs": dict(self.wl.attrs),  # e.g. eps, as in force here for the shape set
            "guard": GUARD_ELEMS,
            "cases": self.cases_plan,
            "timed": self.timed,
            "bench": self.bench.to_dict(),
            "arch": self.be.arch,
            "module": {**self.artifact.module_spec(), "path": module},
            "launches": self.launches,
            "scratch": self.scratch,
        }

    def judge(self, run: ChildRun, workdir: Path) -> Evidence:
        """Classify the child's run (its files in ``workdir``) and finish the evidence."""
        self.fingerprint["sandbox"] = run.sandbox or {"error": "the child exited before reporting its sandbox"}
        self.fingerprint["child_wall_s"] = {"cuda": round(run.wall_s, 4)}
        if run.stdout:
            self.sections.append(f"== child stdout (tail) ==\n{run.stdout}")
        if run.stderr:
            self.sections.append(f"== child stderr (tail) ==\n{run.stderr}")
        nvrtc = None if run.timed_out or run.disk else _child_compile_failure(run.result)
        if nvrtc is not None:
            self.sections.append(f"== compile (NVRTC, in the sandbox) ==\n{nvrtc}")
            return self.finish(Outcome.compile_error, "NVRTC rejected the source")
        extras = _child_extras(run.result)
        if extras.get("device"):
            self.fingerprint["device"] = extras["device"]
        if extras.get("kernels"):
            self.static["runtime"] = extras["kernels"]
        status, reason, cases, metrics, samples = judge(self.wl, self.cases_plan, self.timed, run, workdir,
                                                         self.timeout_s, self.limits)
        metrics.update(_static_metrics(self.static))
        notes = reference_notes(self.wl, cases)
        if notes:
            self.sections.append(notes)
        if first_call_note(metrics):
            self.sections.append(f"== first call ==\n{first_call_note(metrics)}")
        wrong = [c for c in cases if c["verdict"] == Outcome.wrong_result]
        if wrong and self.store_limit:
            try:
                added = self.store.add_many(self.wl.name, wrong,
                                            candidate=candidate_hash(self.source, self.params, self.be.fingerprint(),
                                                                         self.custom_plan))
                self.sections.append(f"== validation store ==\n{added} new failure case(s) kept for '{self.wl.name}'")
            except (OSError, ValueError) as exc:
                self.sections.append(f"== validation store ==\ncould not keep the failure cases: {exc}")
        return self.finish(status, reason, metrics=metrics, samples_ms=samples, cases=cases)


def evaluate_cuda(
    workload: str,
    source: str,
    params: Mapping[str, Any],
    *,
    shape_set: str = "llama3-8b",
    timeout_s: float = 60.0,
    bench: BenchSettings | None = None,
    seed: int | None = None,
    target: str | None = None,
    launch_plan: Mapping[str, Any] | LaunchPlan | None = None,
    compile_options: Mapping[str, Any] | None = None,
    sandbox: SandboxPolicy | None = None,
    validation_store: ValidationStore | None = None,
) -> Evidence:
    """Compile, validate and time one CUDA candidate in the sandbox.

    Args:
        workload, source, params, shape_set, timeout_s, bench, seed, sandbox,
            validation_store: as :func:`kernels.evaluate`. ``source`` is CUDA C with
            ``extern "C" __global__`` kernels, or PTX.
        target: ``cuda-sm90`` (default: ``$KERNELS_CUDA_TARGET`` or ``cuda-sm90``),
            ``cuda-sm100``, ...
        launch_plan: the candidate's :class:`LaunchPlan` or its dict; default the
            template's (:func:`kernels.templates.default_launch_plan` at ``params``).
        compile_options: :class:`~kernels.backends.cuda.CompileOptions` dict (``compiler``,
            ``extra`` flags); default NVRTC for the target's architecture.

    Returns:
        :class:`~kernels.evidence.Evidence`; ``static`` holds the nvcc resources and
        occupancy per launch, ``metrics`` also ``registers[<kernel>]``,
        ``spill_bytes[<kernel>]``, ``smem_static_bytes[<kernel>]``, ``occupancy_min``.

    Raises:
        KeyError: unknown workload or shape set.
        ValueError: unknown target.
        ImportError: cupy is missing (an infrastructure failure: this host cannot run CUDA
            candidates).
        OSError: the sandbox cannot be started.
    """
    ev = CudaEvaluation(workload, source, params, shape_set=shape_set, timeout_s=timeout_s, bench=bench,
                        seed=seed, target=target, launch_plan=launch_plan, compile_options=compile_options,
                        validation_store=validation_store)
    early = ev.prepare()
    if early is not None:
        return early
    policy = dataclasses.replace(sandbox or SandboxPolicy.from_env(), memory_bytes=_cuda_memory_bytes())
    workdir = make_workdir(policy, {ev.module_name: Path(ev.artifact.path)})
    logdir = private_tempdir("log")
    try:
        run = run_child(ev.request(workdir), workdir, logdir, ev.timeout_s, policy=policy, env=child_env())
        return ev.judge(run, workdir)
    finally:
        remove_tree(workdir)
        remove_tree(logdir)
