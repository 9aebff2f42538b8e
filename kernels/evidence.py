"""The evidence of one evaluation (:class:`Evidence`), as every backend returns it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from kernels.outcome import Outcome

__all__ = ["Evidence"]


@dataclass(frozen=True)
class Evidence:
    """Everything measured about one candidate evaluation. Never modified once returned.

    Attributes:
        status: the classified :class:`~kernels.outcome.Outcome`.
        metrics: ``latency_ms`` (sum over the shape set of per-shape median latency, ms),
            ``latency_iqr_ms``, ``latency_ci_low_ms``/``latency_ci_high_ms`` (sums of the
            per-shape 95% bootstrap CI bounds of the median, ms), ``gbps`` (GB/s),
            ``gflops`` (GFLOP/s) and ``roofline_pct`` (% of the host's roofline) over the
            whole set, ``max_abs_error``, ``max_rel_error``, and per shape
            ``latency_ms[<label>]``, ``gbps[<label>]``, ``gflops[<label>]``,
            ``roofline_pct[<label>]``; the first call apart from that steady state
            (:mod:`kernels.evaluation.first_call`): ``first_call_ms`` (the timing child's first call of
            the candidate, ms), ``first_call_ratio`` (over the same shape's median),
            ``first_call_flag`` (1.0 when a shape's first call costs over 10x its steady
            median: set-up cost on first use, also noted in ``log``; else 0.0) and per shape
            ``first_call_ms[<label>]``, ``first_call_ratio[<label>]``. Partial or empty when
            ``status`` is not ``ok``.
        samples_ms: raw timing samples (ms) per timed shape label, e.g.
            ``"rows=512,hidden=4096"``.
        cases: per validation case ``{kind, label, shape, seed, max_abs_error,
            max_rel_error, passed, reason, verdict}`` (plus ``reference``: the problems of an
            unusable float64 reference, ``{output, size, nonfinite, largest, bound}`` each,
            and ``skipped: True`` for a stored case skipped for it); ``kind`` is ``"validation"``,
            ``"regression"`` (a stored failure case), ``"timed"`` (the last timed call's
            output), ``"fresh"`` (the call on fresh contents in the timed buffers) or
            ``"picked"`` (a warm-up or timed call drawn at random, CPU backend).
        log: compiler log, child stdout/stderr tails and the reason for ``status``.
        fingerprint: backend environment (compiler, flags, CPU) plus evaluation settings:
            ``bench``, ``seed``, ``omp`` / ``omp_validation`` (OpenMP environment of the
            timing / validation child), ``limits`` (physical limits and their source),
            ``sandbox`` (what the sandbox applied, see :mod:`kernels.sandbox.spawn`),
            ``child_wall_s`` (seconds per child, start to exit) and ``compile_s`` (seconds in
            the compiler, or reading the compile cache).
        duration_s: wall-clock seconds of the whole evaluation.
        static: static evidence (CUDA: nvcc's registers, spills, shared memory per kernel
            and the theoretical occupancy of every launch, see
            :func:`kernels.evaluation.cuda_pipeline.static_summary`); empty for other backends.
    """

    status: Outcome
    metrics: dict[str, float] = field(default_factory=dict)
    samples_ms: dict[str, list[float]] = field(default_factory=dict)
    cases: list[dict[str, Any]] = field(default_factory=list)
    log: str = ""
    fingerprint: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    static: dict[str, Any] = field(default_factory=dict)

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
                "static": self.static,
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
