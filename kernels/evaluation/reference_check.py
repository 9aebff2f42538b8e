"""Whether a float64 reference can judge a candidate: finite and within the workload's bound.

A reference that is not finite, or larger than any sane output of the workload's math on
its inputs (:meth:`kernels.workloads.base.Workload.reference_bound`), cannot be matched by
a correct float32 kernel (the evaluator rejects non-finite outputs, and the relative error
to a value the math cannot produce says nothing). Such a case is the workload's failure:
the evaluator classifies it ``invalid_input`` (:class:`kernels.outcome.Outcome`), never
stores it as a failure case, and skips a stored case whose reference went bad. Everything
here runs in the trusted parent, on the parent's own inputs and references.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = ["ReferenceProblem", "fix_hint", "reference_problems", "describe"]


@dataclass(frozen=True)
class ReferenceProblem:
    """What is wrong with one output of a float64 reference.

    Attributes:
        output: the output's name.
        size: its element count.
        nonfinite: elements that are NaN or +-inf.
        largest: the largest finite magnitude (0.0 when none is finite).
        bound: the workload's magnitude bound for these inputs.
    """

    output: str
    size: int
    nonfinite: int
    largest: float
    bound: float

    def describe(self) -> str:
        """One line, e.g. ``"output 'o': 3 of 4096 elements NaN/inf; largest finite magnitude
        1.2e+31 > bound 4.1e+09"``."""
        parts = []
        if self.nonfinite:
            parts.append(f"{self.nonfinite} of {self.size} elements NaN/inf")
        relation = ">" if self.largest > self.bound else "<="
        parts.append(f"largest finite magnitude {self.largest:.3g} {relation} bound {self.bound:.3g}")
        return f"output '{self.output}': " + "; ".join(parts)


def _largest(arr: np.ndarray) -> tuple[int, float]:
    """(non-finite count, largest finite magnitude) of ``arr``; two passes, no temporary
    when every element is finite (the common case)."""
    if arr.size == 0:
        return 0, 0.0
    hi, lo = float(np.max(arr)), float(np.min(arr))
    if math.isfinite(hi) and math.isfinite(lo):
        return 0, max(abs(hi), abs(lo))
    finite = np.isfinite(arr)
    count = int(arr.size - np.count_nonzero(finite))
    values = arr[finite]
    return count, float(np.max(np.abs(values))) if values.size else 0.0


def reference_problems(reference: Mapping[str, np.ndarray], bound: float) -> list[ReferenceProblem]:
    """The outputs of ``reference`` that cannot judge a candidate: with a NaN/inf element or a
    magnitude above ``bound``; [] when every output is usable.

    Args:
        reference: ``{output name: float64 array}`` (``Workload.reference`` of some inputs).
        bound: the workload's magnitude bound for those inputs
            (:meth:`kernels.workloads.base.Workload.reference_bound`).
    """
    problems = []
    for name, ref in reference.items():
        arr = np.asarray(ref)
        nonfinite, largest = _largest(arr)
        if nonfinite or not largest <= bound:
            problems.append(ReferenceProblem(name, int(arr.size), nonfinite, largest, bound))
    return problems


def describe(problems: Iterable[ReferenceProblem]) -> str:
    """The problems of one reference, joined: ``"the float64 reference is unusable: ..."``."""
    return "the float64 reference is unusable: " + "; ".join(p.describe() for p in problems)


def fix_hint(workload: str, labels: Iterable[str]) -> str:
    """How to fix ``workload`` whose references went bad at the shapes ``labels`` (e.g.
    ``"rows=7,hidden=259"``): the input generator, not the candidate, in words."""
    where = "; ".join(sorted(set(labels))) or "these shapes"
    return (f"the input generator of workload '{workload}' produces inputs whose float64 reference overflows "
            f"or leaves the workload's magnitude bound at shape {where}: bound the generated values (e.g. keep "
            f"gates and decays at most 1, normalise keys) or shorten the sequence, or fix the reference; if such "
            f"magnitudes are real, override the workload's magnitude_bound. No candidate can be judged on these "
            f"inputs until then")
