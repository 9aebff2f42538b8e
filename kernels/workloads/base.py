"""The workload contract: :class:`Workload`, its arguments and shapes (the registry of the
workloads is :mod:`kernels.workloads.registry`)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

if TYPE_CHECKING:
    from kernels.space import DesignSpace

Shape = Mapping[str, int]
Arrays = dict[str, np.ndarray]


#: Largest finite float32 (about 3.4e38).
FLOAT32_MAX = float(np.finfo(np.float32).max)
#: Factor of :func:`default_magnitude_bound` above the worst case of bilinear math on the inputs.
MAGNITUDE_HEADROOM = 1e3


def default_magnitude_bound(inputs: Arrays, attrs: Mapping[str, float] | None = None) -> float:
    """Default sane-magnitude bound of a workload's float64 reference:
    ``MAGNITUDE_HEADROOM * n * max(1, m)**2``, where ``m`` is the largest finite magnitude of
    any input element and ``n`` the element count of the largest input.

    Why: every registered workload's outputs are bounded by ``n * m**2``: a sum of at most
    ``n`` products of two input elements (GEMM: ``K * m**2``; SwiGLU: ``m**2``), an average or
    a normalisation (softmax: 1; attention: ``m``; RMSNorm, LayerNorm: ``sqrt(hidden) * m``),
    or a delta-rule recurrence with L2-normalised keys and gates at most 1 (KDA: its state
    grows at most linearly in the sequence, ``|o| <= seq * sqrt(dv) * m``); the headroom
    covers constant factors. A reference beyond it did not come from the math on sane
    inputs: it overflowed (e.g. a recurrence whose generated gates grow the state at every
    step, as FlashInfer-Bench's GDN reference did on long sequences).

    Args:
        inputs: ``{name: array}`` (any float dtype); ``attrs`` is unused (the signature of
            :attr:`Workload.magnitude_bound`).

    Returns:
        The bound (a positive float; ``MAGNITUDE_HEADROOM`` for no inputs).
    """
    m, n = 1.0, 1
    for arr in inputs.values():
        a = np.asarray(arr)
        if a.size == 0:
            continue
        n = max(n, int(a.size))
        hi, lo = float(np.max(a)), float(np.min(a))
        if math.isfinite(hi) and math.isfinite(lo):
            m = max(m, hi, -lo)
        else:  # non-finite inputs: the largest finite magnitude counts
            finite = a[np.isfinite(a)]
            if finite.size:
                m = max(m, float(np.max(np.abs(finite))))
    return MAGNITUDE_HEADROOM * n * m * m


def shape_label(shape: Shape) -> str:
    """Stable label of a shape, e.g. ``'rows=512,hidden=4096'`` (axis order as given)."""
    return ",".join(f"{k}={int(v)}" for k, v in shape.items())


@dataclass(frozen=True)
class Arg:
    """One argument of the C entry point, in call order.

    ``kind``: ``"in"`` (read-only float32 array), ``"out"`` (float32 array the kernel
    writes), ``"int"`` (an axis of the shape, C ``int``), ``"float"`` (a workload attribute,
    C ``float``).
    """

    name: str
    kind: Literal["in", "out", "int", "float"]


@dataclass(frozen=True)
class Workload:
    """One operator with exact math.

    Attributes:
        name: registry key, also the C entry point's name.
        c_signature: the C prototype candidates must define (docs/design.md, candidate contract).
        args: the entry point's arguments in order.
        attrs: scalar attributes passed as ``float`` args (e.g. ``eps``).
        shape_sets: named lists of shapes that are timed (and validated).
        validation_shapes: per shape set, extra odd shapes validated only (2 seeds each).
        generate: ``(shape, seed) -> {input name: float32 C-contiguous array}``; deterministic.
        reference: ``(inputs, attrs) -> {output name: float64 array}``.
        output_shapes: ``shape -> {output name: shape tuple}``.
        errors: ``(output float32, reference float64) -> (max_abs_error, max_rel_error)``.
        tolerance: pass iff ``max_rel_error <= tolerance`` (and no NaN/inf).
        flops, bytes: FLOP and minimum DRAM byte counts of one call at ``shape``.
        error_definition: how ``errors`` measures error, in words.
        shape_set_attrs: per shape set, attributes that override ``attrs`` (a model
            constant such as ``eps`` belongs to the model the shape set comes from); see
            :meth:`for_shape_set`.
        salted_reference: optional ``(salted inputs, reference of the inputs before the
            swaps, swaps, attrs) -> reference of the salted inputs``, recomputing only what
            the swaps change. ``swaps``: ``{input: [i, j]}``, two flat indices in one row
            (last axis) of that input, as the timing loop swaps them before every call. For
            workloads whose reference is costly (GEMM: O(MNK), the update O((M + N) K));
            without it the evaluator computes the whole reference of the salted inputs.
        magnitude_bound: optional ``(inputs, attrs) -> float``: the largest magnitude a sane
            float64 reference of ``inputs`` may have (see :meth:`reference_bound`); default
            :func:`default_magnitude_bound`. Override it where the math allows larger outputs
            (products of more than two inputs) or to check more tightly (softmax: 1).
        spaces: default design space of the workload's template per backend (``"cpu"`` for
            ``template.c``, ``"cuda"`` for ``template.cu`` in the workload's folder).
        launch_plan: ``params -> launch plan`` (JSON dict for
            :meth:`kernels.evaluation.launch_plan.LaunchPlan.from_dict`) of ``template.cu`` at a
            parameter point; None without a CUDA template.
        numpy_baseline: optional ``(inputs, attrs, out) -> outputs``: the workload in plain
            NumPy float32, run once per call (``out``: a per-input-set dict the function may
            fill with preallocated outputs); timed by :func:`kernels.baselines.baseline_latency_ms`.
        shape_of: optional ``inputs -> shape``: the axes of a call (what the C entry point
            receives as ints) read from its input arrays' shapes; how an inference engine
            (``engines/``) sizes an operator's call.
        numpy_into: optional ``(inputs, outputs, shape, attrs) -> None``: the workload in
            NumPy float32 (+ BLAS) writing every output into the preallocated float32 arrays
            of ``outputs`` (inputs read-only, C-contiguous); what an inference engine
            (``engines/``) runs for an operator without a compiled kernel.
        flashinfer: FlashInfer Trace definitions this workload implements: definition name ->
            (FlashInfer axis -> our axis, in our axis order), e.g.
            ``{"rmsnorm_h4096": {"batch_size": "rows", "hidden_size": "hidden"}}``.
    """

    name: str
    c_signature: str
    args: tuple[Arg, ...]
    attrs: Mapping[str, float]
    shape_sets: Mapping[str, tuple[Shape, ...]]
    validation_shapes: Mapping[str, tuple[Shape, ...]]
    generate: Callable[[Shape, int], Arrays]
    reference: Callable[[Arrays, Mapping[str, float]], Arrays]
    output_shapes: Callable[[Shape], dict[str, tuple[int, ...]]]
    errors: Callable[[np.ndarray, np.ndarray], tuple[float, float]]
    tolerance: float
    flops: Callable[[Shape], float]
    bytes: Callable[[Shape], float]
    error_definition: str = field(default="")
    shape_set_attrs: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    salted_reference: Callable[[Arrays, Arrays, Mapping[str, list[int]], Mapping[str, float]], Arrays] | None = None
    magnitude_bound: Callable[[Arrays, Mapping[str, float]], float] | None = None
    spaces: Mapping[str, DesignSpace] = field(default_factory=dict)
    launch_plan: Callable[[Mapping[str, Any]], dict[str, Any]] | None = None
    numpy_baseline: Callable[[Arrays, Mapping[str, float], dict], object] | None = None
    shape_of: Callable[[Mapping[str, np.ndarray]], dict[str, int]] | None = None
    numpy_into: Callable[[Mapping[str, np.ndarray], dict, Shape, Mapping[str, float]], None] | None = None
    flashinfer: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    @property
    def entry_point(self) -> str:
        return self.name

    @property
    def inputs(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.kind == "in")

    @property
    def outputs(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.args if a.kind == "out")

    def reference_bound(self, inputs: Arrays) -> float:
        """Largest magnitude a sane float64 reference of ``inputs`` may have: the workload's
        ``magnitude_bound`` (default :func:`default_magnitude_bound`), never above the
        float32 maximum (3.4e38: no float32 output can come closer to a larger value)."""
        bound = (self.magnitude_bound or default_magnitude_bound)(inputs, self.attrs)
        return min(float(bound), FLOAT32_MAX)

    def attrs_for(self, shape_set: str | None) -> dict[str, float]:
        """Attributes in force for ``shape_set``: ``attrs`` updated with its overrides."""
        return {**self.attrs, **self.shape_set_attrs.get(shape_set or "", {})}

    def for_shape_set(self, shape_set: str | None) -> Workload:
        """This workload with ``attrs`` as in force for ``shape_set`` (itself when the set has
        no overrides), so code that reads ``wl.attrs`` needs no other change."""
        if not shape_set or shape_set not in self.shape_set_attrs:
            return self
        return dataclasses.replace(self, attrs=self.attrs_for(shape_set))

    def shapes(self, shape_set: str) -> tuple[Shape, ...]:
        """Timed shapes of ``shape_set``.

        Raises:
            KeyError: unknown shape set, listing the known ones.
        """
        try:
            return self.shape_sets[shape_set]
        except KeyError:
            known = ", ".join(sorted(self.shape_sets))
            raise KeyError(f"workload '{self.name}' has no shape set '{shape_set}' (known: {known})") from None
