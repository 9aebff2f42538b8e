"""Backends drive a target: compile a candidate and describe the environment.

Every backend implements :class:`Backend`: a ``name``, the ``target_prefix`` of the targets
it serves (``cpu-``, ``cuda-``, ``replay:``), ``supports(target)`` (whether this machine can
drive that target), ``fingerprint()`` (a JSON-serialisable dict of the environment) and its
:class:`Capabilities`, the questions callers ask instead of comparing backend names
(``capabilities("replay").batchable``). Candidates are evaluated through the one pipeline,
:func:`kernels.evaluate`, which routes to the backend's evaluation.

Registry entries are ``"module:Class"`` strings imported on first use, so importing
:mod:`kernels` never pulls in optional dependencies (cupy); :data:`CAPABILITIES` and
:data:`TARGET_PREFIXES` are plain tables here, readable without importing any backend.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    "BACKENDS",
    "CAPABILITIES",
    "TARGET_PREFIXES",
    "Backend",
    "Capabilities",
    "backend_for_target",
    "capabilities",
    "get_backend",
]


@dataclass(frozen=True)
class Capabilities:
    """What a backend does, as the evaluator and the swarm ask it.

    Attributes:
        recorded: evaluations are lookups of recorded measurements in the data set the
            target names: nothing is compiled or run, the source is ignored, there is no
            kernel to launch, re-validate, promote or compare paired, and no shape set.
        batchable: evaluations cost nothing: candidates are evaluated in batches
            (one ``evaluate_batch`` task for many).
        needs_target: :func:`kernels.evaluate` must be given the goal's ``target``
            (it selects the data set or the device architecture).
        launch_plan: candidates carry a launch plan (grid, block, shared memory,
            arguments; :mod:`kernels.evaluation.launch_plan`) instead of a C entry point.
        static_report: a compiled candidate has a static report (registers, spills, shared
            memory, theoretical occupancy; :mod:`kernels.evaluation.static`).
        paired_turns: a paired comparison runs both candidates in one turn-taking child
            (:func:`kernels.comparison.paired.compare_paired`); otherwise paired measurements are
            alternating evaluations.
        measures_baseline: the NumPy baselines (:mod:`kernels.baselines`) are measured on
            this backend's targets.
        host_limits: physical limits (the ``invalid`` check, the roofline) are measured on
            the evaluating host (:mod:`kernels.hostperf`).
        datasheet_limits: physical limits come from the target's datasheet
            (:func:`kernels.backends.cuda.roofline_for`).
        host_target: serves only this machine's own target (``cpu-<machine>``).
        native_helpers: the evaluation compiles the trusted native helpers (guard-fault
            locator, cache eviction and thread-team start) and guards buffers with
            inaccessible pages (:mod:`kernels.sandbox.guard_pages`).
        language: candidate source language, ``"c"``, ``"cuda"``, or ``""`` (no source).
    """

    recorded: bool = False
    batchable: bool = False
    needs_target: bool = False
    launch_plan: bool = False
    static_report: bool = False
    paired_turns: bool = False
    measures_baseline: bool = False
    host_limits: bool = False
    datasheet_limits: bool = False
    host_target: bool = False
    native_helpers: bool = False
    language: Literal["c", "cuda", ""] = ""


BACKENDS: dict[str, str] = {
    "cpu": "kernels.backends.cpu:CpuBackend",
    "replay": "kernels.backends.replay:ReplayBackend",
    "cuda": "kernels.backends.cuda:CudaBackend",
}

TARGET_PREFIXES: dict[str, str] = {"cpu": "cpu-", "cuda": "cuda-", "replay": "replay:"}

CAPABILITIES: dict[str, Capabilities] = {
    "cpu": Capabilities(paired_turns=True, measures_baseline=True, host_limits=True, host_target=True,
                        native_helpers=True, language="c"),
    "cuda": Capabilities(needs_target=True, launch_plan=True, static_report=True, datasheet_limits=True,
                         language="cuda"),
    "replay": Capabilities(recorded=True, batchable=True, needs_target=True),
}


@runtime_checkable
class Backend(Protocol):
    """What every registered backend provides.

    Attributes:
        name: the registry name (``"cpu"``, ``"cuda"``, ``"replay"``).
        target_prefix: how the names of the targets it serves begin.
        capabilities: its :class:`Capabilities`.
    """

    name: str
    target_prefix: str
    capabilities: Capabilities

    def supports(self, target: str) -> bool:
        """Whether this machine can drive ``target``."""
        ...

    def fingerprint(self) -> dict[str, Any]:
        """The environment that determines results (JSON-serialisable)."""
        ...


def capabilities(name: str) -> Capabilities:
    """The :class:`Capabilities` of the backend registered as ``name`` (no import).

    Raises:
        KeyError: unknown backend (lists the known ones).
    """
    try:
        return CAPABILITIES[name]
    except KeyError:
        raise KeyError(f"unknown backend '{name}' (known: {', '.join(sorted(BACKENDS))})") from None


def backend_for_target(target: str) -> str:
    """The name of the backend serving ``target`` by its prefix: ``cpu-*`` -> ``cpu``,
    ``cuda-*`` -> ``cuda``, ``replay:*`` -> ``replay``.

    Raises:
        ValueError: no backend serves targets named like that.
    """
    for name, prefix in TARGET_PREFIXES.items():
        if target.startswith(prefix):
            return name
    raise ValueError(f"unknown target {target!r}: expected cpu-*, cuda-* or replay:<dataset>")


def get_backend(name: str) -> Backend:
    """An instance of the backend registered as ``name``.

    Raises:
        KeyError: unknown backend (lists the known ones).
        ImportError: the backend's module or one of its dependencies is missing.
    """
    try:
        spec = BACKENDS[name]
    except KeyError:
        raise KeyError(f"unknown backend '{name}' (known: {', '.join(sorted(BACKENDS))})") from None
    module_name, _, cls_name = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ImportError(f"backend '{name}' needs {exc.name or module_name}: {exc}") from exc
    return getattr(module, cls_name)()
