"""Fresh input contents for every timed call of the promotion guard's engine check.

A kernel that caches its outputs by a hash of its inputs (or by a few of their elements) is
fast only when calls repeat their inputs; the timed calls of the guard must therefore never
repeat them. The protocol is the evaluator's (``kernels.sandbox.child``, ``_Io.salt`` and
``_Rotation``): the calls rotate between several input sets, and before each call two
different values of one row (last axis) of every input are swapped, undone after the call.
A swap keeps row sums, norms and value ranges as generated, so the work a call does is the
work of the generated inputs.

The swaps come from a generator seeded by the item, so both sides of a paired comparison
see the same contents at the same call number.
"""

from __future__ import annotations

import numpy as np

Swaps = dict[str, tuple[int, int]]


def salt(arrays: dict[str, np.ndarray], rng: np.random.Generator) -> Swaps:
    """Swap two different values within one row (last axis) of every array, in place.

    ``arrays``: ``{name: C-contiguous array}`` of any shape and dtype; an array with fewer
    than two elements, or a row whose values the four tries find all equal, is left alone.

    Returns:
        ``{name: (i, j)}``, flat indices of the swaps made (:func:`unsalt` undoes them).
    """
    swaps: Swaps = {}
    draws = rng.random((len(arrays), 5)).tolist()  # per array: the element i, 4 tries of j
    for (name, arr), (u, *tries) in zip(arrays.items(), draws):
        flat = arr.reshape(-1)  # a view: the arrays are C-contiguous
        if flat.size < 2:
            continue
        width = int(arr.shape[-1]) if arr.ndim else 1
        i = int(u * flat.size)
        start = i - i % width
        for t in tries:
            j = start + int(t * width)
            if flat[j] != flat[i]:
                flat[i], flat[j] = flat[j], flat[i]
                swaps[name] = (i, j)
                break
    return swaps


def unsalt(arrays: dict[str, np.ndarray], swaps: Swaps) -> None:
    """Undo :func:`salt`'s ``swaps`` on the same ``arrays`` (a swap is its own inverse)."""
    for name, (i, j) in swaps.items():
        flat = arrays[name].reshape(-1)
        flat[i], flat[j] = flat[j], flat[i]


class Rotation:
    """Per call the next of ``sets`` (``[{name: array}]``, at least one), salted.

    :meth:`before` (untimed) moves to the next set and salts it; :meth:`after` (untimed)
    undoes the salt, so every set keeps its generated contents between its turns.

    Raises:
        ValueError: no sets.
    """

    def __init__(self, sets: list[dict[str, np.ndarray]], seed: int) -> None:
        if not sets:
            raise ValueError("a rotation needs at least one input set")
        self.sets = sets
        self.rng = np.random.default_rng([int(seed), 7])
        self.cur = len(sets) - 1
        self.swaps: Swaps | None = None

    @property
    def current(self) -> dict[str, np.ndarray]:
        return self.sets[self.cur]

    def before(self) -> dict[str, np.ndarray]:
        """Undo any pending salt, move to the next set, salt it; returns that set."""
        self.after()
        self.cur = (self.cur + 1) % len(self.sets)
        self.swaps = salt(self.sets[self.cur], self.rng)
        return self.sets[self.cur]

    def after(self) -> None:
        if self.swaps is not None:
            unsalt(self.sets[self.cur], self.swaps)
            self.swaps = None
