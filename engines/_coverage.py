"""Whether a production kernel may run at an engine operator's shapes.

A kernel is promoted for one shape set of its workload (``rmsnorm`` at ``test-small``:
``hidden=256``); its evidence (validation, timing) holds at those shapes only. An engine
operator binds it only where the kernel is *covered* at the operator's shape:

* some shape of its shape set has the operator's **model axes** (every axis but the load
  axes below: ``hidden``, ``N``, ``K``, ``heads``, ``head_dim``, ``inter``, ...), or
* it was validated and benchmarked at those model axes (``KernelSpec.validated_shapes``:
  a passed promotion guard check of an engine records the shapes it checked), or
* it is a candidate under the promotion guard, which validates and benchmarks it at the
  engine's shapes in that very check.

The **load axes** (:data:`LOAD_AXES`: token, row, batch and cache-length counts) change from
call to call of one engine (a prompt of 24 tokens, a decode step of 1) and are not compared:
the workload contract makes every kernel correct at any of them, and shape sets list a few
of each (``rows`` 1, 32, 512).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

#: Axes that vary with the load of one engine (tokens per call, sequences, cache length).
LOAD_AXES = frozenset({"rows", "M", "tokens", "seq", "batch", "kv_len", "batch_heads"})


def model_axes(shape: Mapping[str, int]) -> dict[str, int]:
    """``shape`` without its :data:`LOAD_AXES` (the axes fixed by the model's dimensions)."""
    return {k: int(v) for k, v in shape.items() if k not in LOAD_AXES}


def _label(axes: Mapping[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in axes.items()) or "any shape"


def _set_shapes(spec: Any) -> list[dict[str, int]]:
    """Model axes of the shapes of ``spec``'s shape set (none when its workload has no such set)."""
    from kernels.workloads import get_workload  # noqa: PLC0415

    try:
        shapes = get_workload(spec.workload).shape_sets.get(spec.shape_set, ()) if spec.shape_set else ()
    except KeyError:
        shapes = ()
    return _unique(model_axes(s) for s in shapes)


def _unique(axes: Iterable[dict[str, int]]) -> list[dict[str, int]]:
    out: list[dict[str, int]] = []
    for a in axes:
        if a not in out:
            out.append(a)
    return out


def covering_shapes(spec: Any) -> list[dict[str, int]]:
    """Model axes at which ``spec`` (a :class:`~engines._binding.KernelSpec`) holds evidence:
    its shape set's shapes and its validated shapes."""
    return _unique([*_set_shapes(spec), *(model_axes(s) for s in spec.validated_shapes or ())])


def covers(spec: Any, shape: Mapping[str, int]) -> tuple[bool, str]:
    """``(covered, why)``: may ``spec`` run at the operator shape ``shape``?

    ``why`` says, for a person, what the decision rests on (e.g. ``"promoted for shape set
    test-small (hidden=256), not for hidden=4096"``).
    """
    want = model_axes(shape)
    if spec.origin == "candidate":
        return True, "candidate under the promotion guard, validated and benchmarked at these shapes by it"
    have = covering_shapes(spec)
    if want in have:
        src = f"promoted for shape set {spec.shape_set}" if want in _set_shapes(spec) else "validated and benchmarked"
        return True, f"{src} at {_label(want)}"
    known = "; ".join(_label(a) for a in have) or "no known shapes"
    where = f"shape set {spec.shape_set!r}" if spec.shape_set else "no shape set"
    return False, f"promoted for {where} ({known}), not validated or benchmarked at {_label(want)}"


def choose(specs: Iterable[Any], shape: Mapping[str, int]) -> tuple[Any | None, str]:
    """The first of ``specs`` (in the registry's order of preference) covered at ``shape``,
    and why; ``(None, why)`` when none is, ``why`` naming what each was promoted for."""
    refused = []
    for spec in specs:
        ok, why = covers(spec, shape)
        if ok:
            return spec, why
        refused.append(f"candidate {spec.candidate}: {why}" if spec.candidate is not None else why)
    return None, "; ".join(refused)
