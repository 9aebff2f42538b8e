"""The registry of workloads: every built-in workload, with the serving shapes recorded in
FlashInfer Trace added as shape sets ``flashinfer-<definition>``
(:func:`kernels.flashinfer_shapes.with_imported_shape_sets`), and the shape sets registered in
this process (:func:`add_shape_set`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from kernels.flashinfer_shapes import with_imported_shape_sets
from kernels.workloads.attention import ATTENTION
from kernels.workloads.base import Workload, shape_label
from kernels.workloads.decode_attention import DECODE_ATTENTION
from kernels.workloads.fused_add_rmsnorm import FUSED_ADD_RMSNORM
from kernels.workloads.gelu import GELU
from kernels.workloads.gemm import GEMM
from kernels.workloads.gemm_bias import GEMM_BIAS
from kernels.workloads.kda import KDA
from kernels.workloads.layernorm import LAYERNORM
from kernels.workloads.rmsnorm import RMSNORM
from kernels.workloads.rope import ROPE
from kernels.workloads.softmax import SOFTMAX
from kernels.workloads.swiglu import SWIGLU

__all__ = ["WORKLOADS", "add_shape_set", "get_workload"]


def _registry() -> dict[str, Workload]:
    # Operators of the inference engines (engines/): MiniLM encoder, Llama and KDA layers.
    engine_ops = (LAYERNORM, GELU, GEMM_BIAS, ATTENTION, ROPE, SWIGLU, DECODE_ATTENTION)
    # Plus the serving shapes recorded in FlashInfer Trace, as shape sets flashinfer-<definition>.
    return with_imported_shape_sets({w.name: w for w in (RMSNORM, GEMM, SOFTMAX, FUSED_ADD_RMSNORM, KDA, *engine_ops)})


WORKLOADS: Mapping[str, Workload] = _registry()


def add_shape_set(workload: str, name: str, shapes, *, validation_shapes=None, attrs=None) -> Workload:
    """Register shape set ``name`` of ``workload`` in this process (an explicit list of shapes,
    e.g. the shapes an inference engine's operators run at: ``engine-llama-layer-small``).

    The evaluator reads shapes in the parent and hands them to the sandboxed child, so a set
    registered here is evaluated like a built-in one. Registering the same set again replaces it.

    Args:
        shapes: the timed shapes (axis -> int); at least one.
        validation_shapes: odd shapes validated only (default: those of the workload's
            ``test-small`` set, else none).
        attrs: attributes in force for the set (e.g. ``{"eps": 1e-5}``); keys must be the
            workload's attributes.

    Returns:
        The updated workload (also what :func:`get_workload` returns from now on).

    Raises:
        KeyError: unknown workload.
        ValueError: no shapes, a shape whose axes are not the workload's, or an unknown
            attribute.
    """
    wl = get_workload(workload)
    shapes = tuple({str(k): int(v) for k, v in dict(s).items()} for s in shapes)
    if not shapes:
        raise ValueError(f"shape set '{name}' of '{workload}' needs at least one shape")
    axes = {a.name for a in wl.args if a.kind == "int"}
    for s in shapes:
        if set(s) != axes:
            raise ValueError(f"shape {shape_label(s)} of '{workload}' must give exactly the axes {', '.join(sorted(axes))}")
    attrs = {str(k): float(v) for k, v in (attrs or {}).items()}
    unknown = set(attrs) - set(wl.attrs)
    if unknown:
        raise ValueError(f"'{workload}' has no attribute {', '.join(sorted(unknown))} (known: {', '.join(wl.attrs) or 'none'})")
    odd = tuple(validation_shapes) if validation_shapes is not None else tuple(wl.validation_shapes.get("test-small", ()))
    new = dataclasses.replace(
        wl, shape_sets={**wl.shape_sets, name: shapes}, validation_shapes={**wl.validation_shapes, name: odd},
        shape_set_attrs={**wl.shape_set_attrs, name: attrs} if attrs else
        {k: v for k, v in wl.shape_set_attrs.items() if k != name})
    WORKLOADS[workload] = new  # type: ignore[index]  (the registry is a dict)
    return new


def get_workload(name: str) -> Workload:
    """The registered workload ``name``.

    Raises:
        KeyError: unknown name; the message lists the known workloads.
    """
    try:
        return WORKLOADS[name]
    except KeyError:
        raise KeyError(f"unknown workload '{name}' (known: {', '.join(sorted(WORKLOADS))})") from None
